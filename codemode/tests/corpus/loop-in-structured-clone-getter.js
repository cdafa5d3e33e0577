// expect: failed:timeout
structuredClone({ get a() { for (;;) {} } });
