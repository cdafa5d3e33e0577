// expect: failed:memory_limit_exceeded
// Memory exhaustion is not catchable.
const keep = [];
try { for (;;) keep.push('x'.repeat(1e6).split('')); } catch (e) { return 'caught'; }
