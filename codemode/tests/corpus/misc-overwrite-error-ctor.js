// expect: failed:guest_error
// error-contains: typed
globalThis.Error = function () { while (true) {} };
throw new TypeError('typed');
