// expect: completed
// value: ["undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined"]
return [typeof process, typeof require, typeof fetch, typeof module, typeof exports, typeof Deno, typeof Bun, typeof XMLHttpRequest, typeof WebSocket, typeof importScripts];
