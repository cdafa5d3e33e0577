// expect: failed:guest_error
// error-contains: ReferenceError
return await admin_delete({ all: true });
