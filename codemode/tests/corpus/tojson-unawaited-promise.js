// expect: completed
// value-contains: a
return echo({ a: 1 });
