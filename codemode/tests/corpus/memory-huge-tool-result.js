// expect: completed
// value-contains: limit
try { await big({ bytes: 9 * 1024 * 1024 }); return 'no'; } catch (e) { return e.message; }
