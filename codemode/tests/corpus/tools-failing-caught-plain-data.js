// expect: completed
// value: [true, "tool_error", "unknown", true]
try { await failing({}); } catch (e) { return [e instanceof Error, e.code, e.effectStatus, Object.getPrototypeOf(e) === Error.prototype]; }
