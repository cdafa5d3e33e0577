// expect: waiting
for (;;) { await new Promise((r) => setTimeout(r, 1)); }
