// expect: completed
// value: false
return /^(a+)+$/.test('a'.repeat(10) + 'b');
