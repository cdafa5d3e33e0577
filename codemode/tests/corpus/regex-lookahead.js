// expect: failed:timeout
return /^(?=(a+)+b)/.test('a'.repeat(40));
