// expect: failed:timeout
do {} while (true);
