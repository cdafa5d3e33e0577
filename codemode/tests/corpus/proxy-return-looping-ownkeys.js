// expect: failed:timeout
return new Proxy({}, { ownKeys() { while (true) {} } });
