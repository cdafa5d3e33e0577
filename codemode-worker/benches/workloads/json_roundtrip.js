// JSON round trip: parse a 10,000-record tool result, reshape it, stringify it back (compact and pretty).
(function () {
  var parsed = JSON.parse(RECORDS_JSON);
  var shaped = parsed.filter(function (r) { return r.active; }).map(function (r) {
    return { id: r.id, who: r.name + "@" + r.team, score: Math.round(r.score), tags: r.tags.join(",") };
  });
  var compact = JSON.stringify(shaped);
  var pretty = JSON.stringify(parsed.slice(0, 2000), null, 2);
  return parsed.length + ":" + compact.length + ":" + pretty.length + ":" + JSON.parse(compact).length;
})()
