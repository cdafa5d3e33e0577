// expect: failed:guest_error
// error-contains: RangeError
return new TextDecoder('latin1');
