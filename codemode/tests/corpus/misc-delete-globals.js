// expect: completed
// value: 1
for (const k of Object.getOwnPropertyNames(globalThis)) { try { delete globalThis[k]; } catch (e) {} }
return 1;
