// expect: completed
// output-contains: truncated
text('y'.repeat(1024 * 1024));
return 'done';
