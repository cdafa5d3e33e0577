// expect: completed
// value: {"n":"10","list":["1","2"]}
return { n: 10n, list: [1n, 2n] };
