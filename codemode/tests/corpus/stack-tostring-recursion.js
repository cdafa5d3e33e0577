// expect: completed
const o = { toString() { return String(this); } };
return String(o);
