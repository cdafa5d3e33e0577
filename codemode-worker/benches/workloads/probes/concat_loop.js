// `s += x` 100,000 times (a 600 KB result).
(function () { var s = ""; for (var i = 0; i < 100000; i++) s += "ab" + (i % 10) + "xyz"; return s.length; })()
