// Regex extraction: pull user and latency out of every line with a global regex, aggregate per user.
(function () {
  var total = {}, count = 0;
  for (var m of TEXT.matchAll(/user=(\w+) latency=(\d+)ms/g)) {
    total[m[1]] = (total[m[1]] || 0) + Number(m[2]);
    count++;
  }
  var errors = TEXT.match(/^.*\bERROR\b.*$/gm).length;
  var re = /service=(api-\d)/g, m2, services = {};
  while ((m2 = re.exec(TEXT)) !== null) services[m2[1]] = true;
  return count + ":" + Object.keys(total).length + ":" + errors + ":" + Object.keys(services).length;
})()
