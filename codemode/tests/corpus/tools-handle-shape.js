// expect: completed
// value: {"name":"echo","keys":["callableName","toolName","label","description","source","input","output","describe"],"json":["callableName","toolName","label","description","source","input"],"frozen":true}
// A handle as the reference's: its `name` is the callable name, its metadata enumerable (`output` present, undefined,
// for a tool without an output hint), `toJSON` the metadata.
const [h] = await catalog.search('echo');
return {
  name: h.name,
  keys: Object.keys(h),
  json: Object.keys(JSON.parse(JSON.stringify(h))),
  frozen: Object.isFrozen(h),
};
