// expect: failed:guest_error
// error-contains: TypeError
// An operation the embedder did not declare is not callable (and nothing reaches the host).
return await namespaces.kv.drop({ all: true });
