// expect: waiting
for (;;) { await echo({ i: 1 }); }
