// expect: completed
// value: 0
const a = Date.now();
for (let i = 0; i < 1e5; i++) {}
return Date.now() - a;
