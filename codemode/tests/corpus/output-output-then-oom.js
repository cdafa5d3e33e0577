// expect: failed:memory_limit_exceeded
// output-contains: before oom
text('before oom');
let s = 'x';
for (;;) s += s;
