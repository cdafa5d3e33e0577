// expect: completed
Promise.prototype.then = function () { throw new Error('hijacked'); };
return 'value';
