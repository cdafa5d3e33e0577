// expect: completed
// value-contains: getter
// value-contains: "b":2
return { get a() { throw new Error('getter'); }, b: 2 };
