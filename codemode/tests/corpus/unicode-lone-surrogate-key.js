// expect: completed
// value: {"\ufffd": 1}
return { ['\uD800']: 1 };
