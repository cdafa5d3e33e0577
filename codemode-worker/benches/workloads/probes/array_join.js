// Array.prototype.join of 100,000 short strings.
(function () { var a = []; for (var i = 0; i < 100000; i++) a.push("ab" + (i % 10) + "xyz"); return a.join("\n").length; })()
