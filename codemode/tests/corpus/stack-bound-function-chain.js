// expect: failed:memory_limit_exceeded
let f = function () { return 1; };
for (let i = 0; i < 100000; i++) f = f.bind(null);
try { return f(); } catch (e) { return e.name; }
