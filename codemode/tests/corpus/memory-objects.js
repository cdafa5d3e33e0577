// expect: failed:memory_limit_exceeded
const a = [];
for (;;) a.push(JSON.parse('[' + '{"a":1,"b":{}},'.repeat(1e5) + '{}]'));
