// expect: completed
// value: 1
console.log('\uDFFF');
return 1;
