// expect: failed:timeout
class A { static { while (true) {} } }
