// String building: a CSV report of the records with `+=` in a loop, and the same through Array.prototype.join.
(function () {
  var csv = "id,name,team,score\n";
  for (var i = 0; i < RECORDS.length; i++) {
    var r = RECORDS[i];
    csv += r.id + "," + r.name + "," + r.team + "," + r.score + "\n";
  }
  var rows = [];
  for (var j = 0; j < RECORDS.length; j++) rows.push([RECORDS[j].id, RECORDS[j].name, RECORDS[j].team].join(","));
  var joined = rows.join("\n");
  return csv.length + ":" + joined.length;
})()
