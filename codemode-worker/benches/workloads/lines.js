// Line splitting: split a 1 MB log into lines and summarize them.
(function () {
  var lines = TEXT.split("\n");
  var nonEmpty = 0, chars = 0;
  for (var i = 0; i < lines.length; i++) {
    if (lines[i].length > 0) nonEmpty++;
    chars += lines[i].length;
  }
  return lines.length + ":" + nonEmpty + ":" + chars;
})()
