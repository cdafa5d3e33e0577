// expect: completed
// value: ["\ufffd", "a\ufffdb", "\udbff\udfff"]
return ['\uD800', 'a\uDC00b', '\uDBFF\uDFFF'];
