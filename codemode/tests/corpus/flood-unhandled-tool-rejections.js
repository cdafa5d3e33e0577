// expect: failed:unhandled_rejection
// error-contains: promise rejection unhandled: Error: the failing tool failed
for (let i = 0; i < 100; i++) failing({});
return 'fire and forget';
