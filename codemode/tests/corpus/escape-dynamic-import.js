// expect: failed:invalid_input
const fs = await import('fs');
return fs;
