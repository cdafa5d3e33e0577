// expect: completed
// value: "survived"
for (let i = 0; i < 3000; i++) Promise.reject(new Error('r' + i));
return 'survived';
