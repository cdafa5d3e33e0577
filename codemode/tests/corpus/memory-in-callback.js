// expect: failed:memory_limit_exceeded
const keep = [];
[1].forEach(() => { for (;;) keep.push('x'.repeat(1e5).split('')); });
