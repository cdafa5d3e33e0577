// expect: completed
// value: {"ok":true}
JSON.stringify = () => { throw new Error('mine'); };
JSON.parse = () => { throw new Error('mine'); };
return { ok: true };
