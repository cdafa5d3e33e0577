// expect: completed
try { await store('k'.repeat(100000), 1); return 'stored'; } catch (e) { return 'refused'; }
