// expect: failed:engine_limit
const p = new Proxy({}, { get(t, k, r) { return r[k]; } });
return p.x;
