// expect: completed
// value: "done"
// output-contains: [console output truncated]
for (let i = 0; i < 3000; i++) console.log('log line', i);
return 'done';
