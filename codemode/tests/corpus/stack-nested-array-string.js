// expect: completed
// value: 0
let a = [];
for (let i = 0; i < 100000; i++) a = [a];
return String(a).length;
