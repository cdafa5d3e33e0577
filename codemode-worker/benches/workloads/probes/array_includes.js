// Array.prototype.includes and indexOf on a 100,000-element array, 200 lookups each.
(function () {
  var a = []; for (var i = 0; i < 100000; i++) a.push(i);
  var hits = 0;
  for (var j = 0; j < 200; j++) { if (a.includes(99999 - j)) hits++; if (a.indexOf(-j) >= 0) hits++; }
  return hits;
})()
