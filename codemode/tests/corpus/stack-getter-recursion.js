// expect: failed:engine_limit
const o = { get x() { return this.x; } };
return o.x;
