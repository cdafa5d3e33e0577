// expect: completed
// value: [55296, 56320, 4, 2]
// With a reviver, JSON.parse once fell back to Boa's parser, which rejects lone-surrogate escapes and passed a third
// argument; it now parses like it does without one and calls the reviver with (key, value).
const calls = [];
const v = JSON.parse('{"a":"\\ud800","b":["\\udc00"]}', function (k, value) {
  calls.push(arguments.length);
  return value;
});
return [v.a.charCodeAt(0), v.b[0].charCodeAt(0), calls.length, calls[0]];
