// expect: completed
// value: 1
// output-contains: MaxDepth
let o = [];
for (let i = 0; i < 100000; i++) o = [o];
json(o);
return 1;
