// JSON.stringify and parse of a value nested 100 levels deep (Boa's JSON.parse stops at about 127).
(function () {
  var v = 0;
  for (var i = 0; i < 100; i++) v = { a: v };
  return JSON.parse(JSON.stringify(v)).a ? "ok" : "?";
})()
