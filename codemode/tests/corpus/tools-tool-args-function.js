// expect: completed
// value: {"n":1}
const r = await echo({ f() {}, n: 1 });
return r;
