// expect: failed:timeout
return ('a'.repeat(40) + 'b').split(/(a+)+c/).length;
