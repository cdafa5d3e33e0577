// expect: completed
// value: false
// A string callback must not be compiled: it is ignored, never evaluated.
globalThis.hit = false;
setTimeout('globalThis.hit = true', 0);
await new Promise((r) => setTimeout(r, 5));
return hit;
