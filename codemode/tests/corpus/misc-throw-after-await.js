// expect: failed:guest_error
// error-contains: late
await echo({});
throw new RangeError('late');
