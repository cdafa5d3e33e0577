// expect: failed:guest_error
const p = new Proxy({}, { get(t, k, r) { return r[k]; } });
return p.x;
