// expect: completed
// value: 2000
const a = Array.from({ length: 2000 }, (_, i) => i);
a.sort(() => (Math.random() < 0.5 ? -1 : 1));
return a.length;
