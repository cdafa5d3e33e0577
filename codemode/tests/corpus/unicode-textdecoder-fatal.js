// expect: failed:guest_error
// error-contains: TypeError
return new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xff]));
