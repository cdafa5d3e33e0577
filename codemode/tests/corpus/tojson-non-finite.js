// expect: completed
// value: [null, null, null, 0]
return [NaN, Infinity, -Infinity, -0];
