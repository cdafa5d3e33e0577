// expect: completed
// value: 100000
return 'e\u0301'.repeat(100000).normalize('NFC').length;
