// expect: completed
// value: 4
const out = [];
for (const a of [1, 'x', null, [1, 2]]) { try { out.push(await echo(a)); } catch (e) { out.push(e.code); } }
return out.length;
