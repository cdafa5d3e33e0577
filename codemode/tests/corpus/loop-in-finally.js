// expect: failed:timeout
try { return 1; } finally { for (;;) {} }
