// expect: failed:guest_error
// error-contains: EvalError
return Reflect.apply(Function, null, ['return 1'])();
