// The reference's own functions, loaded from the installed dist of npm openclaw@2026.9.6 (scripts/reference/run.sh
// installs it into target/reference and names the folder in $REFERENCE_DIR). Nothing is re-implemented: the dist's
// chunk names are content-hashed, so each function is found by scanning dist/*.mjs for its definition and reading
// the chunk's `export { local as alias }` line.
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";

const major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  console.error(`Node ${process.versions.node}: openclaw@2026.9.6 needs Node >=24.16; run scripts/reference/run.sh`);
  process.exit(2);
}

const home = process.env.REFERENCE_DIR ? pathToFileURL(`${process.env.REFERENCE_DIR}/`) : new URL("./", import.meta.url);
export const DIST = new URL("node_modules/openclaw/dist/", home);
const distDir = fileURLToPath(DIST);
const wanted = {
  runCodeModeScriptHeadless: "async function runCodeModeScriptHeadless(",
  createAgentHarnessToolSurfaceRuntimeCore: "function createAgentHarnessToolSurfaceRuntimeCore(",
  registerHeadlessToolSearchCatalog: "function registerHeadlessToolSearchCatalog(",
  createToolSearchCatalogRef: "function createToolSearchCatalogRef(",
};
/** Where each function was found: `{ name: { file, alias } }`. */
export const found = {};
for (const file of readdirSync(distDir)) {
  if (!file.endsWith(".mjs")) continue;
  const text = readFileSync(distDir + file, "utf8");
  for (const [name, needle] of Object.entries(wanted)) {
    if (found[name] || !text.includes(needle)) continue;
    const exportLine = text.match(/export \{([^}]*)\};\s*$/m);
    const alias = exportLine?.[1]
      .split(",")
      .map((s) => s.trim().split(/\s+as\s+/))
      .find(([local]) => local === name)?.[1];
    if (alias) found[name] = { file, alias };
  }
}
/** The functions by name. */
export const api = {};
for (const name of Object.keys(wanted)) {
  if (!found[name]) throw new Error(`could not locate ${name} in ${distDir}`);
  const mod = await import(new URL(found[name].file, DIST));
  api[name] = mod[found[name].alias];
  if (typeof api[name] !== "function") throw new Error(`${name} is not a function in ${found[name].file}`);
}

/** The package's version. */
export const version = JSON.parse(readFileSync(new URL("../package.json", DIST), "utf8")).version;

/**
 * The model-facing `exec` and `wait` tools over `tools`, built by createCodeModeTools through
 * createAgentHarnessToolSurfaceRuntimeCore(...).compactTools(tools) (src/agents/harness/tool-surface-bridge.ts),
 * with config `tools.codeMode.executor` set to `executor` ("node" | "quickjs") as in the product.
 */
export function controlTools(executor, tools) {
  const config = { tools: { codeMode: { enabled: true, executor } } };
  const core = api.createAgentHarnessToolSurfaceRuntimeCore({
    config,
    agentId: "main",
    sessionKey: "agent:main:reference",
    sessionId: "reference-session",
    runId: "reference-run",
    modelToolsEnabled: true,
    forceCodeModeControls: true,
  });
  const surface = core.compactTools(tools).tools;
  const exec = surface.find((t) => t.name === "exec");
  const wait = surface.find((t) => t.name === "wait");
  if (!exec || !wait) throw new Error("the exec and wait control tools were not produced");
  return { exec, wait, surface };
}
