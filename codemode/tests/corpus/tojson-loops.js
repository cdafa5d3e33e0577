// expect: failed:timeout
return { toJSON() { for (;;) {} } };
