// expect: failed:guest_error
const b = new ArrayBuffer(1, { maxByteLength: 2 ** 40 });
return b.byteLength;
