// expect: completed
// value: 1
text('x\uD800y');
return 1;
