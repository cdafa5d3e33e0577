// expect: failed:engine_limit
function f() { f(); }
try { f(); } catch (e) { return 'caught ' + e.name; }
