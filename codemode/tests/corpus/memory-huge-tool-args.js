// expect: failed:guest_error
// error-contains: limit
return await echo({ s: 'x'.repeat(5 * 1024 * 1024) });
