// expect: completed
// value: [20000, 20000]
// A reviver walks text nested as deep as the parser takes without one (V8 throws a RangeError here).
let calls = 0;
let r = JSON.parse('['.repeat(20000) + ']'.repeat(20000), (k, v) => (calls++, v));
let depth = 0;
while (Array.isArray(r) && r.length) {
  r = r[0];
  depth++;
}
return [depth + 1, calls];
