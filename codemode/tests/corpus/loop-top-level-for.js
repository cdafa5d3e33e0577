// expect: failed:timeout
for (;;) {}
