// expect: failed:guest_error
// error-contains: can no longer finish
await new Promise(() => {});
