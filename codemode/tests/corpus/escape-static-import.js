// expect: failed:invalid_input
import fs from 'fs';
return fs;
