// expect: failed:engine_limit
const a = (n) => b(n + 1);
const b = (n) => a(n + 1);
return a(0);
