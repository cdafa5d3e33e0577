// expect: completed
// value: 1
// output-contains: truncated
text('é🦞'.repeat(100000));
return 1;
