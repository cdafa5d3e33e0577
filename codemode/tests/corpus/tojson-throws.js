// expect: completed
// value-contains: bad toJSON
// value-contains: "a":1
return { a: 1, b: { toJSON() { throw new Error('bad toJSON'); } } };
