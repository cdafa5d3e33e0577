// expect: waiting
return await slow({ ms: 5000 });
