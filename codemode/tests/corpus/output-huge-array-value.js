// expect: completed
// value-contains: truncated
return Array.from({ length: 20000 }, (_, i) => i);
