// expect: completed
const seen = [];
const o = { a: { toJSON(k) { seen.push(k); return 1; } } };
return [o, seen];
