// expect: failed:timeout
for (;;) await null;
