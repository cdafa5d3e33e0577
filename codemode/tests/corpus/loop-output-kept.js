// expect: failed:timeout
// output-contains: before the loop
text('before the loop');
while (true) {}
