// expect: completed
// value: true
const r = Math.random();
return r >= 0 && r < 1;
