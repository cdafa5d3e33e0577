// expect: failed:guest_error
// error-contains: DataCloneError
return structuredClone({ f() {} });
