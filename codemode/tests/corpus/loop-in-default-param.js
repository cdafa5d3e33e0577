// expect: failed:timeout
function f(a = (() => { for (;;) {} })()) {}
f();
