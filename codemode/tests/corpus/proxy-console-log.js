// expect: completed
// value: "ok"
// output-contains: Unrenderable
console.log(new Proxy({}, { ownKeys() { throw new Error('nope'); } }));
return 'ok';
