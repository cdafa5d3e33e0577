// expect: completed
// value-contains: TypeError
// value-contains: bad
return new TypeError('bad');
