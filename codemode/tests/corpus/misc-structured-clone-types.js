// expect: completed
// value: [0, 2, true, 4]
const c = structuredClone({ d: new Date(0), m: new Map([[1, 2]]), s: new Set([3]), t: new Uint8Array([4]) });
return [c.d.getTime(), c.m.get(1), c.s.has(3), c.t[0]];
