// expect: completed
// value: ["TypeError",0,"TypeError"]
// Once spun a worker core until the deadline: a waitAsync no other agent can notify, awaited or not.
const i = new Int32Array(new SharedArrayBuffer(16));
const out = [];
try {
  Atomics.waitAsync(i, 0, 0, 1000);
} catch (e) {
  out.push(e.name);
}
out.push(Atomics.notify(i, 0, 1));
try {
  out.push(Atomics.wait(i, 0, 0, 0));
} catch (e) {
  out.push(e.name);
}
return out;
