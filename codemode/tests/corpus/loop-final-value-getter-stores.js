// expect: completed
// value: {"x":1}
let n = 0;
return { get x() { store('getter-key', ++n); return n; } };
