// expect: failed:invalid_input
return \u0072equire('fs');
