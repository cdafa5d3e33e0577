// expect: failed:guest_error
// error-contains: ReferenceError
return await tool_search({ query: 'x' });
