// expect: completed
// value: ["x"]
// sloppy-mode `with` must not reach anything new
const o = { x: 1 };
let r;
(function () { return 1 })();
return Object.keys(o);
