// expect: failed:guest_error
// error-contains: failing tool failed
return await failing({});
