// expect: waiting
await yield_control('let the host breathe');
return 1;
