// expect: completed
// value: "\ufffda\ufffd\ufffd"
return new TextDecoder().decode(new Uint8Array([0xff, 0x61, 0xc0, 0x80]));
