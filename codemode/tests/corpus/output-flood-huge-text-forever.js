// expect: failed:timeout
// Output past maxOutputBytes is dropped as it arrives: the host keeps the budget, not the flood.
const s = 'x'.repeat(8e6);
for (;;) text(s);
