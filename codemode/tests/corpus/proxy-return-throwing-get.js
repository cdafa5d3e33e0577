// expect: failed:guest_error
// error-contains: trap
// Resolving the cell's promise reads `then` through the trap: an ordinary rejection.
return new Proxy({ a: 1 }, { get() { throw new Error('trap'); } });
