// expect: failed:timeout
Promise.resolve().then(() => { while (true) {} });
await new Promise(() => {});
