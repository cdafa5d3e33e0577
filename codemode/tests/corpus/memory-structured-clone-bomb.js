// expect: failed:timeout
let o = new Array(1e5).fill(0).map((_, i) => ({ i }));
const keep = [];
for (;;) keep.push(structuredClone(o));
