// expect: completed
// value: ["undefined",false,"function","function"]
return [typeof Atomics.waitAsync, 'waitAsync' in Atomics, typeof Atomics.wait, typeof Atomics.notify];
