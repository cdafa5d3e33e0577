// expect: completed
// value: "ok"
json(new Proxy([1, 2], { get(t, k) { if (k === 'length') throw new Error('len'); return t[k]; } }));
return 'ok';
