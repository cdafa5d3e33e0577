// expect: failed:timeout
outer: for (;;) { for (;;) { continue outer; } }
