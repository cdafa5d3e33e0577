// expect: completed
// value: "arg"
return await new Promise((r) => setTimeout(r, 1, 'arg'));
