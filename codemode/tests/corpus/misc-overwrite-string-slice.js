// expect: completed
// value: 1
String.prototype.slice = () => { throw new Error('no'); };
console.log('x'.repeat(600));
return 1;
