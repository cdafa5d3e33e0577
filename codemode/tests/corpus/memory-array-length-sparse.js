// expect: completed
// value: 4294967295
const a = [];
a[2 ** 32 - 2] = 1;
return a.length;
