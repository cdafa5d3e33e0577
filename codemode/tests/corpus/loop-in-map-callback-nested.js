// expect: failed:timeout
[...Array(1000)].map(() => { for (let i = 0; i < 1e7; i++) {} });
