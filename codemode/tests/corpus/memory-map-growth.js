// expect: failed:memory_limit_exceeded
const m = new Map();
for (let i = 0; ; i++) m.set(i, 'x'.repeat(1e5).split(''));
