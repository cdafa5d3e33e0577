// expect: completed
// value: 1
// output-contains: more
const o = {};
for (let i = 0; i < 10000; i++) o['k' + i] = i;
console.log(o);
return 1;
