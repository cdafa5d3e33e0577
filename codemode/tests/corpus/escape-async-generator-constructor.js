// expect: failed:guest_error
// error-contains: EvalError
const AG = (async function* () {}).constructor;
return AG('yield 1');
