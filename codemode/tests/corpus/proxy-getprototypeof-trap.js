// expect: completed
// value-contains: Unserializable
return { p: new Proxy({ a: 1 }, { getPrototypeOf() { throw new Error('proto'); } }) };
