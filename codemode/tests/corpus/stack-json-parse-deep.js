// expect: completed
// value: 1
// JSON.parse keeps its own stack (src/natives/json.rs in codemode-worker), so deep nesting parses as in V8 instead of failing.
const s = '['.repeat(200000) + ']'.repeat(200000);
return JSON.parse(s).length;
