// expect: completed
// value: 1
let a = [1];
for (let i = 0; i < 100000; i++) a = [a];
return a.flat(Infinity).length;
