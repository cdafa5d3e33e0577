// expect: completed
// value: ["echo", "string", false]
return [echo.name, typeof echo.toString(), Object.getOwnPropertyNames(echo).includes('caller')];
