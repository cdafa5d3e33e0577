// expect: completed
// output-contains: truncated
for (let i = 0; i < 5000; i++) text('line ' + i);
return 'done';
