// expect: completed
// value: "object"
const args = new Proxy({ a: 1 }, { get() { throw new Error('boom'); } });
const r = await echo({ args });
return typeof r;
