// expect: completed
// value: []
// Walks every prototype reachable from globals looking for host objects.
const seen = new Set();
const found = [];
function walk(o, depth) {
  if (o === null || (typeof o !== 'object' && typeof o !== 'function') || seen.has(o) || depth > 4) return;
  seen.add(o);
  for (const k of Reflect.ownKeys(o)) {
    let v;
    try { v = o[k]; } catch (_) { continue; }
    if (typeof k === 'string' && /^(process|require|natives|request|emit|__host|host)/.test(k)) found.push(k);
    walk(v, depth + 1);
  }
  walk(Object.getPrototypeOf(o), depth + 1);
}
walk(globalThis, 0);
return found;
