// expect: failed:unhandled_rejection
// error-contains: promise rejection unhandled: Error: r0
for (let i = 0; i < 3000; i++) Promise.reject(new Error('r' + i));
return 'survived';
