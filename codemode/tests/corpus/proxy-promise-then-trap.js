// expect: completed
// value: "then getter"
// A thenable whose then getter throws: awaiting it rejects, the program catches.
const t = { get then() { throw new Error('then getter'); } };
try { await t; } catch (e) { return e.message; }
