// expect: failed:timeout
// Grows too slowly to reach the memory limit before the deadline.
const a = [];
for (let i = 0; ; i++) a.push(i, i, i, i, i, i, i, i);
