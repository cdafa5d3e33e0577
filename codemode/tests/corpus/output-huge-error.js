// expect: failed:guest_error
// error-contains: [error truncated]
throw new Error('e'.repeat(1024 * 1024));
