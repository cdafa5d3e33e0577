// expect: failed:timeout
await echo({});
return /(x+x+)+y/.test('x'.repeat(50));
