// expect: completed
// value: {"m":{}}
const m = new Map();
m.set('m', m);
return { m };
