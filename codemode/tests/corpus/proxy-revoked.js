// expect: completed
// value-contains: Unserializable
const { proxy, revoke } = Proxy.revocable({ a: 1 }, {});
revoke();
return { proxy };
