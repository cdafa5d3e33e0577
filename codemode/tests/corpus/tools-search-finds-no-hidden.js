// expect: completed
// value: []
const all = await catalog.all();
return all.map((t) => t.name).filter((n) => ['admin_delete', 'tool_search', 'screenshot', 'exec', 'wait'].includes(n));
