// expect: failed:guest_error
// error-contains: EvalError
const G = (function* () {}).constructor;
return [...G('yield 1')()];
