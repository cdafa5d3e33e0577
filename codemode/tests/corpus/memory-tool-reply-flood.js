// expect: waiting
// A loop of 900 KB echoes, catching errors: each reply is bounded by maxOutputBytes, the inbox then refuses more,
// and the host holds neither the floods of replies nor the errors past its caps.
const a = 'x'.repeat(900 * 1024);
for (;;) { try { await echo({ a }); } catch (e) {} }
