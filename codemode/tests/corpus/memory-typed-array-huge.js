// expect: failed:guest_error
// error-contains: RangeError
return new Uint8Array(2 ** 31).length;
