// expect: failed:guest_error
const e = new Error('x');
Object.defineProperty(e, 'name', { get() { throw new Error('name getter'); } });
throw e;
