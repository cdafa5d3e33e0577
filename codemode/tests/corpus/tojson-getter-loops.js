// expect: failed:timeout
return { get a() { while (true) {} } };
