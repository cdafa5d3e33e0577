// expect: completed
// value: {"op":"kv.get","args":{"x":1}}
// A handle renamed to an undeclared operation still calls the operation it was made for.
const [h] = await catalog.search('Reads a key', { limit: 1 });
try { Object.defineProperty(h, 'callableName', { value: 'namespaces.kv.drop' }); } catch (_) {}
try { Object.defineProperty(h, 'name', { value: 'kv.drop' }); } catch (_) {}
return await h({ x: 1 });
