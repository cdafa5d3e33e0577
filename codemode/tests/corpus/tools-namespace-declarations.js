// expect: completed
// value: {"files":["tools/namespaces.kv.get.d.ts","tools/namespaces.kv.put.d.ts","tools/nodes.list.d.ts"],"declared":true,"listed":["namespaces.kv.get","namespaces.kv.put","nodes.list"]}
const files = (await API.list('tools/')).files.map((f) => f.path).filter((p) => p.includes('.get.') || p.includes('.put.') || p.includes('nodes.'));
const decl = (await API.read('tools/namespaces.kv.get.d.ts')).content;
const listed = catalog.all().map((h) => h.callableName).filter((n) => n.includes('.'));
return { files, declared: decl.includes('declare namespace namespaces.kv'), listed };
