// expect: completed
// value: 10000
const ps = Array.from({ length: 10000 }, (_, i) => Promise.resolve(i));
return (await Promise.all(ps)).length;
