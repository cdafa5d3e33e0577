// expect: completed
// output-contains: "omittedBytes":
// 3,000 lines of 40 bytes: the marker counts every dropped byte (about 150 KB), not only the line it cut.
for (let i = 0; i < 3000; i++) text(String(i).padStart(40, '.'));
return 'done';
