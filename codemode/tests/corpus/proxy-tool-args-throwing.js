// expect: completed
// value-contains: Unserializable: no keys for you
const args = new Proxy({}, { ownKeys() { throw new Error('no keys for you'); } });
return await echo({ args });
