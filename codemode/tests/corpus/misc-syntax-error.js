// expect: failed:invalid_input
return 1 +;
