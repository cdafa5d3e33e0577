// expect: completed
// value-contains: truncated
return { toJSON() { return 'x'.repeat(300000); } };
