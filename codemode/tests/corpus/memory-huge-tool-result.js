// expect: completed
// value: [true,true]
// A 9 MiB nested result is bounded by maxOutputBytes: the program gets the truncation marker, a partial result.
const r = await big({ bytes: 9 * 1024 * 1024 });
return [r.truncated, r.omittedBytes > 9 * 1024 * 1024 - 64 * 1024];
