// expect: failed:timeout
try { throw 1; } catch { while (true) {} }
