// expect: completed
// value: "TypeError"
// Awaiting a waitAsync with no timeout once spun a worker core until the deadline; now it is not there to call.
const i = new Int32Array(new SharedArrayBuffer(16));
try {
  await Atomics.waitAsync(i, 0, 0).value;
  return 'settled';
} catch (e) {
  return e.name;
}
