// expect: failed:guest_error
// error-contains: EvalError
return this.constructor.constructor('return process')();
