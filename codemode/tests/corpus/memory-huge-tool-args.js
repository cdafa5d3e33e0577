// expect: failed:guest_error
// known-bug: JSON.stringify in Boa peaks near 20 bytes per character, so a 5 MB argument exhausts the 64 MiB memory limit before the 4 MiB request-size check can answer with its clear error
// error-contains: limit
return await echo({ s: 'x'.repeat(5 * 1024 * 1024) });
