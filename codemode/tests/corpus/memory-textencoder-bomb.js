// expect: failed:timeout
const keep = [];
const s = 'é'.repeat(1 << 20);
for (;;) keep.push(new TextEncoder().encode(s));
