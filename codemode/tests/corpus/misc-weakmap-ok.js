// expect: completed
// value: 1
const w = new WeakMap();
const k = {};
w.set(k, 1);
return w.get(k);
