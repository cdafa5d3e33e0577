// expect: completed
// value: true
let o = {};
for (let i = 0; i < 100000; i++) o = { o };
const r = await echo({ o });
return JSON.stringify(r).includes('MaxDepth');
