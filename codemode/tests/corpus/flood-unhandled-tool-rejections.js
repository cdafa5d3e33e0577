// expect: completed
// value: "fire and forget"
for (let i = 0; i < 100; i++) failing({});
return 'fire and forget';
