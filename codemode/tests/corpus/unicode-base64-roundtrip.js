// expect: completed
// value: true
const bin = Array.from({ length: 256 }, (_, i) => String.fromCharCode(i)).join('');
return atob(btoa(bin)) === bin;
