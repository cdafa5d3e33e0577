// expect: failed:timeout
JSON.stringify({ toJSON() { while (true) {} } });
