// expect: completed
// value: [true, "function"]
const p = Object.getPrototypeOf(echo);
return [p === Object.getPrototypeOf(async function () {}), typeof p.constructor];
