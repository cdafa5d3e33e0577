// expect: completed
// value: [1, 2, 3]
Array.prototype[Symbol.iterator] = function* () { for (;;) yield 1; };
return [1, 2, 3];
