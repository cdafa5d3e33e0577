// expect: completed
// value: {"s": "\ufffd", "ok": 1}
const r = await echo({ s: '\uD83D', ok: 1 });
return r;
