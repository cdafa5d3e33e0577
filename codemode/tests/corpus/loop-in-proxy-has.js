// expect: failed:timeout
const p = new Proxy({}, { has() { while (true) {} } });
return 'x' in p;
