// expect: failed:memory_limit_exceeded
const a = [];
for (;;) a.push('x'.repeat(1e6).split(''));
