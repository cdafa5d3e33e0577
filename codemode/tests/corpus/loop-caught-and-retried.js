// expect: failed:timeout
// A timeout is not an exception the program can catch and ignore.
for (let i = 0; i < 5; i++) { try { while (true) {} } catch (e) {} }
return 'escaped';
