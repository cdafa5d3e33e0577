// expect: failed:memory_limit_exceeded
let s = 'x';
for (;;) s = s + s;
