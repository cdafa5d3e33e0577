// expect: completed
// value: 1
const r = await echo({ get bad() { throw new Error('arg getter'); }, ok: 1 });
return r.ok;
