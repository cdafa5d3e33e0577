// expect: failed:guest_error
// error-contains: EvalError
const F = Function.bind(null);
return F('return 1')();
