// expect: completed
// value-contains: MaxDepth
let n = 0;
const o = { toJSON() { n++; return { again: o }; } };
return o;
