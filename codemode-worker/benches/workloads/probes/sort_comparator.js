// Array.prototype.sort with a comparator over 10,000 records.
RECORDS.slice().sort(function (a, b) { return a.score - b.score; })[0].id
