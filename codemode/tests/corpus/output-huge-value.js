// expect: completed
// value-contains: truncated
return 'x'.repeat(1024 * 1024);
