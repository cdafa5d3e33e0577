// expect: completed
// value: "string"
Error.prepareStackTrace = (e, frames) => frames.map((f) => f.getThis && f.getThis());
const s = new Error('x').stack;
return typeof s;
