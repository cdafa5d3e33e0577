// expect: completed
// value: null
return undefined;
