// expect: completed
// value: {"names":["big","echo","failing","give","namespaces.kv.get","namespaces.kv.put","nodes.list","slow","Summary_Report"],"first":"tools/big.d.ts"}
// catalog.all() and API.list() sort callable names as localeCompare does (the reference's order), not by code unit
// (which would put `Summary_Report` first).
const names = catalog.all().map((h) => h.callableName);
const files = (await API.list('tools/')).files.map((f) => f.path);
return { names, first: files[0] };
