// expect: completed
// value: [["debug","error","info","log","warn"], null]
return [Object.getOwnPropertyNames(console).sort(), Object.getPrototypeOf(console)];
