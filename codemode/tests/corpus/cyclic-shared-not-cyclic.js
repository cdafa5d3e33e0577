// expect: completed
// value: [{"x":1},{"x":1}]
const shared = { x: 1 };
return [shared, shared];
