// expect: failed:timeout
function* g() { while (true) yield 1; }
for (const _ of g()) {}
