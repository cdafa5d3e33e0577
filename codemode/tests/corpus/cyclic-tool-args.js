// expect: completed
// value-contains: Circular
const o = { a: 1 };
o.self = o;
const r = await echo(o);
return r;
