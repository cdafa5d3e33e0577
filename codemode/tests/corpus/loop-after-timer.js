// expect: failed:timeout
await new Promise((r) => setTimeout(r, 10));
while (true) {}
