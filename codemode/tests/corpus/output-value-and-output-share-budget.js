// expect: completed
// value-contains: truncated
text('o'.repeat(60000));
return 'v'.repeat(60000);
