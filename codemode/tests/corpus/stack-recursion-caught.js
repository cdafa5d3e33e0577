// expect: failed:guest_error
function f() { f(); }
try { f(); } catch (e) { return 'caught ' + e.name; }
