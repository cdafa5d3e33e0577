// expect: failed:timeout
return new Proxy({ a: 1 }, { get() { for (;;) {} } });
