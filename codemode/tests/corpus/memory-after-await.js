// expect: failed:memory_limit_exceeded
await echo({});
let s = 'ab';
while (true) s += s;
