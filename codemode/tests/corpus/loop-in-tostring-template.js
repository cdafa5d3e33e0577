// expect: failed:timeout
const o = { toString() { for (;;) {} } };
return `${o}`;
