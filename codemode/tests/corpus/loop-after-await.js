// expect: failed:timeout
await echo({});
while (true) {}
