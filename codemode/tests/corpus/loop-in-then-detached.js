// expect: failed:timeout
Promise.resolve().then(() => { while (true) {} });
return 1;
