// expect: failed:timeout
async function f() { await null; return f(); }
return await f();
