// expect: failed:guest_error
// error-contains: EvalError
const AsyncFunction = (async () => {}).constructor;
return await AsyncFunction('return 1')();
