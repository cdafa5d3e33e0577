// Object key churn: add and delete 50,000 keys on one object, then a Map doing the same.
(function () {
  var o = {};
  for (var i = 0; i < 50000; i++) { o["k" + i] = i; if (i >= 100) delete o["k" + (i - 100)]; }
  var m = new Map();
  for (var j = 0; j < 50000; j++) { m.set("k" + j, j); if (j >= 100) m.delete("k" + (j - 100)); }
  return Object.keys(o).length + ":" + m.size;
})()
