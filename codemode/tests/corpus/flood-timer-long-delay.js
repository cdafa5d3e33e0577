// expect: waiting
setTimeout(() => {}, 1e9);
return 'never';
