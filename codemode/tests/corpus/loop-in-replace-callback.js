// expect: failed:timeout
'aaa'.replace(/a/g, () => { while (true) {} });
