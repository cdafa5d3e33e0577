// expect: completed
// value: [true, "EvalError"]
try { eval('1') } catch (e) { return [e instanceof EvalError, e.name] }
