// expect: completed
// value: []
const names = ['fs', 'shell', 'bash', 'run', 'execute', 'http', 'fetch', 'readFile', 'system', 'os'];
return names.filter((n) => typeof globalThis[n] !== 'undefined');
