// expect: failed:guest_error
return new RegExp('('.repeat(50000) + ')'.repeat(50000)).test('');
