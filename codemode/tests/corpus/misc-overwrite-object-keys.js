// expect: completed
// value: {"a":1}
Object.keys = () => { while (true) {} };
return { a: 1 };
