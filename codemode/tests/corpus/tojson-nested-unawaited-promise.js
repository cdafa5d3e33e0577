// expect: completed
// value-contains: Unawaited
return { p: echo({ a: 1 }) };
