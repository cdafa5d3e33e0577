// expect: completed
return typeof Temporal;
