// expect: failed:timeout
const it = { [Symbol.iterator]() { return { next() { return { done: false, value: 1 }; } }; } };
return [...it].length;
