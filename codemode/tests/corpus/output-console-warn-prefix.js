// expect: completed
// value: 1
// output-contains: [warn] careful
console.warn('careful');
return 1;
