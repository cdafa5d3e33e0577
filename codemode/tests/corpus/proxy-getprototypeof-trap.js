// expect: completed
// JSON.stringify never asks a value for its prototype, so a throwing getPrototypeOf trap changes nothing.
// value: {"p":{"a":1}}
return { p: new Proxy({ a: 1 }, { getPrototypeOf() { throw new Error('proto'); } }) };
