// Replace: redact users, rewrite latencies with a replacer function, normalize a word.
(function () {
  var a = TEXT.replaceAll("dolor", "DOLOR");
  var b = a.replace(/user=u\d+/g, "user=<redacted>");
  var c = b.replace(/latency=(\d+)ms/g, function (_, ms) { return "latency=" + (Number(ms) / 1000) + "s"; });
  var d = c.split("\t").join(" ");
  return a.length + ":" + b.length + ":" + c.length + ":" + d.length;
})()
