// Group-by and sort over a 10,000-record tool result: per-team stats, top scorers, sorted names.
(function () {
  var groups = {};
  for (var i = 0; i < RECORDS.length; i++) {
    var r = RECORDS[i];
    var g = groups[r.team] || (groups[r.team] = { team: r.team, n: 0, sum: 0, active: 0 });
    g.n++; g.sum += r.score; if (r.active) g.active++;
  }
  var teams = Object.values(groups).sort(function (a, b) { return b.sum - a.sum; });
  var top = RECORDS.slice().sort(function (a, b) { return b.score - a.score || a.id - b.id; }).slice(0, 20);
  var names = RECORDS.map(function (r) { return r.name; }).sort();
  var byTag = {};
  RECORDS.forEach(function (r) { r.tags.forEach(function (t) { (byTag[t] = byTag[t] || []).push(r.id); }); });
  return teams[0].team + ":" + top[0].id + ":" + names[0] + ":" + Object.keys(byTag).length;
})()
