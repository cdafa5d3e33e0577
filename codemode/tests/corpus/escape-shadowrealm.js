// expect: completed
// value: "undefined"
return typeof ShadowRealm;
