// expect: failed:timeout
setTimeout(() => { while (true) {} }, 0);
return 1;
