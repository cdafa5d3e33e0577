// expect: failed:guest_error
// error-contains: ReferenceError
return await screenshot({});
