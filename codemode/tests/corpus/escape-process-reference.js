// expect: failed:guest_error
// error-contains: ReferenceError
return process.env;
