// expect: completed
// value: "done"
// output-contains: c: 3
Object.prototype.toJSON = function () { throw new Error('inherited'); };
json({ a: 1 });
text({ b: 2 });
console.log({ c: 3 });
return 'done';
