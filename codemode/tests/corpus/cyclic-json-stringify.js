// expect: failed:guest_error
// error-contains: TypeError
const o = {};
o.o = o;
return JSON.stringify(o);
