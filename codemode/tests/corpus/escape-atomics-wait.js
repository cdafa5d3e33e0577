// expect: failed:guest_error
const sab = new SharedArrayBuffer(16);
const i = new Int32Array(sab);
return Atomics.wait(i, 0, 0, 100000);
