// Grep-like filtering: keep the ERROR lines of a service, cut a field out of each, count by user.
(function () {
  var hits = TEXT.split("\n").filter(function (l) { return l.includes("ERROR") && l.indexOf("service=api-3") >= 0; });
  var byUser = {};
  for (var i = 0; i < hits.length; i++) {
    var l = hits[i];
    var at = l.indexOf("user=") + 5;
    var user = l.slice(at, l.indexOf(" ", at));
    byUser[user] = (byUser[user] || 0) + 1;
  }
  var dolor = TEXT.split("\n").filter(function (l) { return l.startsWith("2026-11-30T12:1") && l.endsWith("dolor"); });
  return hits.length + ":" + Object.keys(byUser).length + ":" + dolor.length;
})()
