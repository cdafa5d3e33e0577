// expect: completed
// value: true
const p = 'a|'.repeat(500) + 'b';
return new RegExp(p).test('b');
