// expect: failed:guest_error
return 'x'.repeat(2 ** 40).length;
