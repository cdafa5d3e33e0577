// expect: completed
// value: ["undefined","undefined"]
return [typeof WeakRef, typeof FinalizationRegistry];
