// expect: failed:timeout
[1, 2, 3].forEach(() => { while (true) {} });
