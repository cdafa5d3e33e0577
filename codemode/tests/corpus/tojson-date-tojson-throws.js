// expect: completed
// value-contains: Unserializable
Date.prototype.toJSON = () => { throw new Error('date'); };
return { when: new Date(0) };
