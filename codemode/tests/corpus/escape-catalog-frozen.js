// expect: completed
// value: true
try { catalog.search = () => 'mine'; } catch (_) {}
return typeof catalog.search === 'function' && catalog.search !== undefined && Object.isFrozen(catalog);
