// expect: completed
// known-bug: quadratic String.prototype.split in Boa; the linear-time overrides in codemode-vm/src/strings are not installed in the engine yet
// value: 20001
const s = 'lorem ipsum dolor '.repeat(20000);
return s.split('dolor').length;
