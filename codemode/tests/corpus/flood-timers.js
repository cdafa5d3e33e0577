// expect: failed:invalid_input
// error-contains: queue limit
for (let i = 0; i < 300; i++) setTimeout(() => {}, 1);
return 'scheduled';
