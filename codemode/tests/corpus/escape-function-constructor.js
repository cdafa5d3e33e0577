// expect: failed:guest_error
// error-contains: EvalError
return Function('return globalThis')();
