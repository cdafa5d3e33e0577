// expect: completed
// value: {"x":1}
// The final value is encoded once, when the program settles: its getter's own tool call happens once (as in
// Node) and the run ends instead of encoding the value again at every quiescent point.
return { get x() { echo({}); return 1; } };
