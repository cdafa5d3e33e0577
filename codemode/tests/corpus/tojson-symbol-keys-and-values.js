// expect: completed
// value: {}
return { [Symbol('s')]: 1, s: Symbol('v'), f() {} };
