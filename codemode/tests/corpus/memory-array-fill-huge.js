// expect: failed:timeout
return new Array(1e8).fill(0).length;
