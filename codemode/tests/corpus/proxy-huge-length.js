// expect: failed:timeout
return new Proxy([], { get(t, k) { return k === 'length' ? 2 ** 32 - 1 : 1; } });
