// expect: failed:guest_error
throw new Proxy({}, { get() { throw new Error('trap on thrown'); } });
