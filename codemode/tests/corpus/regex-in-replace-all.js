// expect: failed:timeout
return ('a'.repeat(40) + 'b').replace(/(a*)*c/g, 'x');
