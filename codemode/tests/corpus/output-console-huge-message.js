// expect: completed
// value: "done"
console.log('z'.repeat(100000));
return 'done';
