// expect: completed
// value: [2, 4]
Object.freeze(Object.prototype);
Object.freeze(Array.prototype);
return [1, 2].map((x) => x * 2);
