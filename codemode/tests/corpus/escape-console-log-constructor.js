// expect: failed:guest_error
// error-contains: EvalError
return console.log.constructor('return process')();
