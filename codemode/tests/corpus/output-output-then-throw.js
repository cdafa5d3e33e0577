// expect: failed:guest_error
// output-contains: before throw
text('before throw');
throw new Error('after output');
