// expect: failed:guest_error
// error-contains: InvalidCharacterError
return btoa('🦞');
