// expect: failed:guest_error
// error-contains: EvalError
return Function.prototype.constructor('return 1')();
