// expect: failed:timeout
await echo({ a: { toJSON() { for (;;) {} } } });
