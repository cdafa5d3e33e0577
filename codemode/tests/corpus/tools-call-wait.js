// expect: failed:guest_error
// error-contains: ReferenceError
return await wait({ runId: 'cm_x' });
