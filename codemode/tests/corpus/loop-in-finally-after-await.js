// expect: failed:timeout
try { await echo({}); } finally { for (;;) {} }
