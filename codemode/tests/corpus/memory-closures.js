// expect: failed:memory_limit_exceeded
const fs = [];
for (let i = 0; ; i++) fs.push(() => i);
