// expect: failed:memory_limit_exceeded
const keep = [];
for (;;) keep.push(new Float64Array(8 * 1024 * 1024));
