// expect: completed
// value: 60000
const r = await big({ bytes: 60000 });
return r.length;
