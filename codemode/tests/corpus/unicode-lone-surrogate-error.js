// expect: failed:guest_error
// error-contains: bad � error
throw new Error('bad \uD800 error');
