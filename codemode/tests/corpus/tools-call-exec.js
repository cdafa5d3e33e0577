// expect: failed:guest_error
// error-contains: ReferenceError
return await exec({ code: 'return 1' });
