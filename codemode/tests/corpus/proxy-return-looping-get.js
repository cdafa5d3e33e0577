// expect: failed:timeout
// known-bug: when the instruction budget (not the wall clock) runs out inside the final-value encoding, Engine::returned reports guest_error "the return value could not be encoded: NoInstructionsRemainError" instead of timeout; which limit fires first depends on load
return new Proxy({ a: 1 }, { get() { for (;;) {} } });
