// expect: failed:guest_error
// error-contains: EvalError
return eval('1 + 1');
