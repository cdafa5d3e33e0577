// expect: failed:timeout
function spin() { Promise.resolve().then(spin); }
spin();
await new Promise(() => {});
