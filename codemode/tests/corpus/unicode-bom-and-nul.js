// expect: completed
// value: "\ufeff\u0000x"
return '\uFEFF\u0000x';
