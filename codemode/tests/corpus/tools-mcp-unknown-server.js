// expect: completed
// value: ["undefined", []]
return [typeof MCP.evil, Object.keys(MCP)];
