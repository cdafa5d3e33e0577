// expect: completed
// value: 100
const ps = [];
for (let i = 0; i < 100; i++) ps.push(failing({}).catch((e) => e.code));
return (await Promise.all(ps)).length;
