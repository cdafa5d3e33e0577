// expect: completed
// value-contains: Circular
const a = [1];
a.push(a);
return a;
