// expect: failed:guest_error
throw undefined;
