// expect: completed
// value: ["string|a,b", "custom:a1b", "replaced"]
// split/replace/replaceAll look up Symbol.split/Symbol.replace on primitive separators too, as the spec and Node do.
const log = [];
Object.defineProperty(String.prototype, Symbol.split, {
  get() { 'use strict'; log.push(typeof this); return undefined; },
  configurable: true,
});
const parts = 'a,b'.split(',');
Number.prototype[Symbol.split] = function (s) { return 'custom:' + s; };
Boolean.prototype[Symbol.replace] = function () { return 'replaced'; };
return [log.join() + '|' + parts.join(), 'a1b'.split(1), 'atrueb'.replaceAll(true, 'x')];
