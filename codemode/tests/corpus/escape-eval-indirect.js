// expect: failed:guest_error
// error-contains: EvalError
return (0, eval)('globalThis');
