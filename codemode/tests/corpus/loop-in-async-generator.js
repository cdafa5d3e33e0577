// expect: failed:timeout
async function* g() { while (true) { yield 1; } }
for await (const _ of g()) {}
