// expect: failed:timeout
// output-contains: after await
await echo({});
console.log('after await');
for (;;) {}
