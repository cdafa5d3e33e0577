// expect: failed:guest_error
// error-contains: SyntaxError
return new RegExp('(').test('x');
