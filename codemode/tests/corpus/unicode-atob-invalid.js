// expect: failed:guest_error
// error-contains: InvalidCharacterError
return atob('abc=d');
