// expect: failed:memory_limit_exceeded
const s = new Set();
for (;;) s.add('x'.repeat(1e5).split(''));
