// expect: failed:guest_error
throw Symbol('s');
