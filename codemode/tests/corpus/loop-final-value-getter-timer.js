// expect: completed
// value: {"x":1}
let n = 0;
return { get x() { setTimeout(() => {}, 1); return ++n; } };
