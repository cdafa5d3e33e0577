// expect: failed:timeout
await Promise.resolve();
while (true) {}
