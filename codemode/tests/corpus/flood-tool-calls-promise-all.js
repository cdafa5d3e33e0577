// expect: failed:invalid_input
// error-contains: queue limit
return (await Promise.all(Array.from({ length: 300 }, (_, i) => echo({ i })))).length;
