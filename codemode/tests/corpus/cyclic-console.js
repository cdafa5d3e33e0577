// expect: completed
// value: 1
const o = {};
o.o = o;
console.log(o);
return 1;
