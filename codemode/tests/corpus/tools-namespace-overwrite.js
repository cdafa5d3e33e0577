// expect: completed
// value: {"frozen":[true,true,true],"same":true,"call":{"op":"kv.get","args":{"k":1}}}
// A program cannot replace a namespace, its operations or the reserved globals, nor add to them.
const get = namespaces.kv.get;
try { namespaces.kv = { get: async () => 'mine' }; } catch (_) {}
try { namespaces.kv.get = async () => 'mine'; } catch (_) {}
try { delete namespaces.kv.get; } catch (_) {}
try { namespaces.evil = {}; } catch (_) {}
try { globalThis.namespaces = {}; } catch (_) {}
try { nodes.list = async () => 'mine'; } catch (_) {}
const frozen = [Object.isFrozen(namespaces), Object.isFrozen(namespaces.kv), Object.isFrozen(nodes)];
return { frozen, same: namespaces.kv.get === get && !('evil' in namespaces), call: await namespaces.kv.get({ k: 1 }) };
