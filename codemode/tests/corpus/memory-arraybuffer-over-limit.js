// expect: failed:memory_limit_exceeded
return new ArrayBuffer(200 * 1024 * 1024).byteLength;
