// Survey this repository with the embedded read-only tools: list the crates, read every Cargo.toml in parallel,
// and return one compact summary. Run it with: cargo run -p codemode-cli -- run examples/survey.js
const root = await list({ path: "." });
const crates = root.entries.filter((e) => e.type === "dir" && e.name.startsWith("codemode"));
const manifests = await Promise.all(
  crates.map((c) => read({ path: `${c.name}/Cargo.toml` }).catch((e) => ({ error: e.message }))),
);
const summary = crates.map((c, i) => {
  const text = manifests[i].content ?? "";
  const description = /^description = "(.*)"$/m.exec(text)?.[1] ?? "";
  const deps = text.split("\n").filter((l) => l.includes(".workspace = true") && l.startsWith("codemode")).length;
  return { crate: c.name, internalDeps: deps, description };
});
console.log(`surveyed ${summary.length} crates`);
return summary.sort((a, b) => a.internalDeps - b.internalDeps);
