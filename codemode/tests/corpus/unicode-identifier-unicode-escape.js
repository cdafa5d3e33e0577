// expect: failed:guest_error
// error-contains: ReferenceError
return \u0070rocess.env;
