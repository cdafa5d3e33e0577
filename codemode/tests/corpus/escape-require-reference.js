// expect: failed:invalid_input
return require('fs').readFileSync('/etc/passwd', 'utf8');
