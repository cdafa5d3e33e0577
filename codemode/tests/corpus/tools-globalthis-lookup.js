// expect: completed
// value: ["undefined","undefined","undefined","undefined","undefined","undefined"]
return ['exec', 'wait', 'tool_search', 'admin_delete', 'screenshot', 'tool_call'].map((n) => typeof globalThis[n]);
