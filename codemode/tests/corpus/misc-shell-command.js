// expect: failed:invalid_input
rm -rf /
