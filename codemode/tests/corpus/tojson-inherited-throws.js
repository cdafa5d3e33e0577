// expect: completed
Object.prototype.toJSON = function () { throw new Error('inherited'); };
return { a: 1 };
