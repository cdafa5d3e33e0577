// expect: completed
// value-contains: Unserializable
return { inner: new Proxy({}, { ownKeys() { throw new Error('keys trap'); } }) };
