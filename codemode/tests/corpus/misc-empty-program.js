// expect: completed
// value: null

