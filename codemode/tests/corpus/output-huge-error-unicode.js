// expect: failed:guest_error
// error-contains: [error truncated]
throw new Error('🦞'.repeat(100000));
