// expect: completed
// value: [239, 191, 189]
return Array.from(new TextEncoder().encode('\uD800'));
