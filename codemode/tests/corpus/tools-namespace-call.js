// expect: completed
// value: {"get":{"op":"kv.get","args":{"key":"a"}},"nodes":{"op":"nodes.list","args":{}},"keys":[["kv"],["get","put"],["list"]],"skills":"undefined"}
const get = await namespaces.kv.get({ key: 'a' });
const listed = await nodes.list({});
const keys = [Object.keys(namespaces), Object.keys(namespaces.kv), Object.keys(nodes)];
return { get, nodes: listed, keys, skills: typeof skills };
