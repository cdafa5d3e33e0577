// expect: completed
// value: 3000
const all = [];
for (let i = 0; i < 3000; i++) all.push(Promise.reject(new Error('r' + i)));
await null;
let caught = 0;
for (const p of all) p.catch(() => caught++);
await null;
await null;
return caught;
