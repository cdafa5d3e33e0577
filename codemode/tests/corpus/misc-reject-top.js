// expect: failed:guest_error
// error-contains: rejected top
return Promise.reject(new Error('rejected top'));
