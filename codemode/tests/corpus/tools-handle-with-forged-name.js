// expect: completed
// value: {"x":1}
const [h] = await catalog.search('echo');
try { Object.defineProperty(h, 'callableName', { value: 'admin_delete' }); } catch (e) {}
const r = await h({ x: 1 });
return r;
