// expect: failed:timeout
[3, 1, 2].sort(() => { while (true) {} });
