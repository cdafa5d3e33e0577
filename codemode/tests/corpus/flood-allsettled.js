// expect: completed
// value: 50
const r = await Promise.allSettled(Array.from({ length: 50 }, () => failing({})));
return r.filter((x) => x.status === 'rejected').length;
