// expect: completed
// value: [true,"xxxx",true]
// A nested result over maxOutputBytes (64 KiB) is a successful partial result: the truncation marker.
const r = await big({ bytes: 200 * 1024 });
return [r.truncated, r.prefix.slice(1, 5), r.omittedBytes > 130 * 1024];
