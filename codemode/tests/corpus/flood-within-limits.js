// expect: completed
// value: 100
return (await Promise.all(Array.from({ length: 100 }, (_, i) => echo({ i })))).length;
