// expect: failed:guest_error
// error-contains: EvalError
return echo.constructor('return 1');
