// expect: failed:guest_error
let o = {};
for (let i = 0; i < 100000; i++) o = { o };
return typeof structuredClone(o);
