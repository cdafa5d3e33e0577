// expect: completed
function f() { try { return typeof f.caller; } catch (e) { return e.name; } }
return f();
