// expect: failed:guest_error
// error-contains: EvalError
return Reflect.construct(Function, ['return 1'])();
