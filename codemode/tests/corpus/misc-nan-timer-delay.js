// expect: completed
// value: "fired"
return await new Promise((r) => setTimeout(() => r('fired'), NaN));
