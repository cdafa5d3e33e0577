// The 1 MB split/replaceAll/match program of issue 7 (target: under 100 ms in our engine).
(function () {
  var parts = TEXT.split("dolor");
  var replaced = TEXT.replaceAll("dolor", "x");
  var matches = TEXT.match(/dolor/g);
  var lines = TEXT.split("\n");
  return parts.length + ":" + replaced.length + ":" + matches.length + ":" + lines.length;
})()
