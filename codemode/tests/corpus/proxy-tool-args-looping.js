// expect: failed:timeout
const args = new Proxy({ a: 1 }, { get() { while (true) {} } });
return await echo({ args });
