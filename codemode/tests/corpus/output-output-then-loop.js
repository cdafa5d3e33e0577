// expect: failed:timeout
// output-contains: kept 0
for (let i = 0; i < 100; i++) text('kept ' + i);
while (true) {}
