// expect: failed:memory_limit_exceeded
return 'x'.padEnd(2 ** 27, 'yz').length;
