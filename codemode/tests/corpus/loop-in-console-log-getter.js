// expect: failed:timeout
console.log({ get a() { while (true) {} } });
