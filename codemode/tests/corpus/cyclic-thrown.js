// expect: failed:guest_error
const e = new Error('cyclic');
e.self = e;
e.code = e;
throw e;
