// expect: completed
// value: {"calls":1}
let calls = 0;
return { toJSON() { calls++; echo({ calls }); return { calls }; } };
