// expect: failed:timeout
return Array.from({ [Symbol.iterator]: function* () { for (;;) yield 0; } });
