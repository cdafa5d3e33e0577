// expect: failed:timeout
await echo({});
return { get a() { while (true) {} } };
