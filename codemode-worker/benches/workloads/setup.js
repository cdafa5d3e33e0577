// Builds the inputs every workload reads, deterministically and identically in every engine:
// `TEXT` is about 1 MB of log lines, `RECORDS_JSON` a 10,000-record tool result as JSON text and `RECORDS`
// the same value parsed. Not measured: the benches time only the workload scripts.
var WORDS = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
  "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "request", "cache"];
var LEVELS = ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"];
// Park-Miller: every product stays below 2^53, so all engines compute the same sequence exactly.
var seed = 42;
function rand(n) {
  seed = (seed * 48271) % 2147483647;
  return Math.floor((seed / 2147483647) * n);
}
var lines = [];
var size = 0;
for (var i = 0; size < 1048576; i++) {
  var words = [];
  for (var w = 0, n = 4 + rand(8); w < n; w++) words.push(WORDS[rand(WORDS.length)]);
  var line = "2026-11-30T12:" + String(10 + rand(50)) + ":" + String(10 + rand(50)) + "Z " +
    LEVELS[rand(LEVELS.length)] + " service=api-" + rand(8) + " user=u" + rand(500) +
    " latency=" + rand(900) + "ms msg=" + words.join(" ");
  lines.push(line);
  size += line.length + 1;
}
var TEXT = lines.join("\n");
var TEAMS = ["core", "infra", "web", "mobile", "data", "ml", "sec", "ops"];
var records = [];
for (var r = 0; r < 10000; r++) {
  records.push({
    id: r,
    name: "user-" + rand(100000),
    team: TEAMS[rand(TEAMS.length)],
    score: rand(10000) / 100,
    active: rand(3) > 0,
    tags: [WORDS[rand(WORDS.length)], WORDS[rand(WORDS.length)]],
    created: "2026-" + String(1 + rand(12)).padStart(2, "0") + "-" + String(1 + rand(28)).padStart(2, "0"),
  });
}
var RECORDS_JSON = JSON.stringify(records);
var RECORDS = JSON.parse(RECORDS_JSON);
