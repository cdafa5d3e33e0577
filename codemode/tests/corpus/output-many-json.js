// expect: completed
// output-contains: truncated
for (let i = 0; i < 1000; i++) json({ i, pad: 'p'.repeat(100) });
return 'done';
