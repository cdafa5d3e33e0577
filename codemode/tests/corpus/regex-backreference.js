// expect: failed:timeout
return /^(\w+\s?)*$/.test('word '.repeat(30) + '!');
