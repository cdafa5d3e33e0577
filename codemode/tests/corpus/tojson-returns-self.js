// expect: completed
const o = { toJSON() { return o; } };
return o;
