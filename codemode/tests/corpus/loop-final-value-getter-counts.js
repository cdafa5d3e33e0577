// expect: completed
// value: {"x":1}
// A call still open when the program returns: the value is encoded once, so its getter runs once (Node: 1).
let n = 0;
echo({});
return { get x() { return ++n; } };
