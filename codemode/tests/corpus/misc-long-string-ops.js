// expect: completed
// value: 20001
const s = 'lorem ipsum dolor '.repeat(20000);
return s.split('dolor').length;
