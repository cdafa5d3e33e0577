// expect: completed
// value: {"n":42,"s":"T","b":false,"fake":{},"str":12}
// Wrapper objects in a returned value are read as JSON.stringify reads them: ToNumber/ToString for Number and String
// objects (Symbol.toPrimitive, valueOf, toString), the slot for Boolean; an object that only inherits from
// Number.prototype is an ordinary object.
return {
  n: Object.assign(new Number(1), { [Symbol.toPrimitive](hint) { return hint === 'number' ? 42 : 0; } }),
  s: Object.assign(new String('ab'), { toString() { return 'T'; } }),
  b: Object.assign(new Boolean(false), { valueOf() { return true; } }),
  fake: Object.create(Number.prototype),
  str: Object.assign(new Number(1), { valueOf() { return '12'; } }),
};
