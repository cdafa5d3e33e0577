// expect: completed
// value: ["undefined","undefined","undefined","undefined","undefined","undefined"]
return [typeof exec, typeof wait, typeof tool_search, typeof tool_call, typeof admin_delete, typeof screenshot];
