// expect: failed:timeout
// Compiling a 400 KB alternation is slow in the engine's regex compiler; it must end cleanly.
const p = 'a|'.repeat(200000) + 'b';
return new RegExp(p).test('b');
