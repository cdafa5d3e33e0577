// expect: failed:guest_error
// error-contains: not available
return await catalog.describe('exec');
