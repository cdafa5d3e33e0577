// expect: completed
// value: 20000
let p = Promise.resolve(0);
for (let i = 0; i < 20000; i++) p = p.then((v) => v + 1);
return await p;
