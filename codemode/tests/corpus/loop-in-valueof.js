// expect: failed:timeout
const o = { valueOf() { while (true) {} } };
return o + 1;
