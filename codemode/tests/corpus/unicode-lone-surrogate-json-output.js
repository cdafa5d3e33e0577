// expect: completed
// value: 1
// output-contains: "ok":true
json({ k: '\uDC00', ok: true });
return 1;
