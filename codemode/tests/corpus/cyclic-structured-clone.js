// expect: completed
// value: [true, true, true]
const o = { a: [1] };
o.o = o;
o.b = o.a;
const c = structuredClone(o);
return [c.o === c, c.b === c.a, c.a !== o.a];
