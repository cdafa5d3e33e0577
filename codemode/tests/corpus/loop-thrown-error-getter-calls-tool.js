// expect: failed:guest_error
// error-contains: boom 1
// A thrown error is described once: its getters (and their tool calls) run once.
let n = 0;
throw { name: 'Error', get message() { echo({}); return 'boom ' + ++n; } };
