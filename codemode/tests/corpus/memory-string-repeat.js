// expect: failed:memory_limit_exceeded
return 'x'.repeat(2 ** 28).length;
