// expect: completed
// value: {"a":1}
return { [Symbol.toStringTag]: 'Evil', a: 1 };
