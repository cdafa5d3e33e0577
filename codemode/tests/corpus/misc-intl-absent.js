// expect: completed
return typeof Intl;
