// expect: completed
// value-contains: console:TypeError
'use strict';
const out = [];
for (const name of ['console', 'catalog', 'text', 'json', 'MCP', 'API', 'setTimeout']) {
  try { globalThis[name] = 1; out.push(name + ':assigned'); } catch (e) { out.push(name + ':' + e.name); }
}
return out;
