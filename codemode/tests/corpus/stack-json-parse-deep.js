// expect: failed:guest_error
const s = '['.repeat(200000) + ']'.repeat(200000);
return JSON.parse(s).length;
