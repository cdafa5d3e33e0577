// expect: failed:timeout
while (true) {}
