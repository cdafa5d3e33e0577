// expect: completed
// value: true
const s = 'héllo 🦞 ✓';
return new TextDecoder().decode(new TextEncoder().encode(s)) === s;
