// expect: failed:guest_error
// A proxy that claims 2^32 - 1 items fails at once with a clear message instead of running into the timeout.
// error-contains: cannot cross the bridge
return new Proxy([], { get(t, k) { return k === 'length' ? 2 ** 32 - 1 : 1; } });
