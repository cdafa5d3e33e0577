// expect: completed
// value-contains: 6291456
// value-contains: program-data budget exceeded
// Replies past the inbox budget (10 MiB here) fail the call; the program catches it.
const out = [];
for (let i = 0; i < 2; i++) { try { out.push((await big({ bytes: 6 * 1024 * 1024 })).length); } catch (e) { out.push(e.message.slice(0, 40)); } }
return out;
