// expect: completed
return '🦞🦞'.slice(0, 3);
