// expect: completed
// value: 1
// output-contains: [Object]
let o = {};
for (let i = 0; i < 100000; i++) o = { o };
console.log(o);
return 1;
