// expect: completed
// value: "cleared"
for (let i = 0; i < 1000; i++) clearTimeout(setTimeout(() => {}, 1));
return 'cleared';
