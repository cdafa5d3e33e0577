// expect: completed
// value: 5000
let n = 0;
for (let i = 0; i < 5000; i++) Promise.resolve().then(() => n++);
await null;
return n;
