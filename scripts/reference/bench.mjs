// Benchmark harness for the reference OpenClaw Code Mode runtime (npm openclaw@2026.9.6).
// Run it with scripts/reference/run.sh (which installs Node 24 and the package into target/reference and passes
// its arguments on: [--n 30] [--warmup 5] [--executors node,quickjs] [--surfaces headless,exec]).
//
// Nothing is re-implemented: the script loads the package's own dist chunks and calls
//   surface "headless": runCodeModeScriptHeadless({ctx, code, maxToolCalls})   (src/agents/code-mode-headless.ts,
//                       the entry used by cron scripts), with the catalog registered by
//                       registerHeadlessToolSearchCatalog exactly as server-cron does;
//   surface "exec":     the model-facing `exec` tool built by createCodeModeTools via
//                       createAgentHarnessToolSurfaceRuntimeCore(...).compactTools([ping]) (src/agents/harness/tool-surface-bridge.ts).
// The executor is chosen by config `tools.codeMode.executor` ("node" | "quickjs"), as in the product.
// The dist chunk names are content-hashed, so they are located by scanning dist/*.mjs for the
// function definitions and reading each chunk's `export { local as alias }` line.
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : dflt;
};
const N = Number(opt("n", 30));
const WARMUP = Number(opt("warmup", 5));
const EXECUTORS = opt("executors", "node,quickjs").split(",").filter(Boolean);
const SURFACES = opt("surfaces", "headless,exec").split(",").filter(Boolean);

const major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  console.error(`Node ${process.versions.node}: openclaw@2026.9.6 needs Node >=24.16; run scripts/reference/run.sh`);
  process.exit(2);
}

// ---------- locate the reference's own functions in the installed dist ----------
// The folder run.sh installed the package into ($REFERENCE_DIR), else this script's own.
const home = process.env.REFERENCE_DIR ? pathToFileURL(`${process.env.REFERENCE_DIR}/`) : new URL("./", import.meta.url);
const DIST = new URL("node_modules/openclaw/dist/", home);
const distDir = fileURLToPath(DIST);
const wanted = {
  runCodeModeScriptHeadless: "async function runCodeModeScriptHeadless(",
  createAgentHarnessToolSurfaceRuntimeCore: "function createAgentHarnessToolSurfaceRuntimeCore(",
  registerHeadlessToolSearchCatalog: "function registerHeadlessToolSearchCatalog(",
  createToolSearchCatalogRef: "function createToolSearchCatalogRef(",
};
const found = {};
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
const api = {};
for (const name of Object.keys(wanted)) {
  if (!found[name]) throw new Error(`could not locate ${name} in ${distDir}`);
  const mod = await import(new URL(found[name].file, DIST));
  api[name] = mod[found[name].alias];
  if (typeof api[name] !== "function") throw new Error(`${name} is not a function in ${found[name].file}`);
}

// ---------- the trivial host tool ----------
const ping = {
  name: "ping",
  label: "ping",
  description: "Return a small object immediately.",
  parameters: { type: "object", properties: {}, additionalProperties: false },
  execute: async () => ({ content: [{ type: "text", text: '{"ok":true}' }], details: { ok: true } }),
};

const CELLS = {
  trivial: { code: "return 1", expect: 1 },
  ten_calls: {
    code: "let n = 0;\nfor (let i = 0; i < 10; i++) { const r = await ping({}); if (r.ok) n++; }\nreturn n;",
    expect: 10,
  },
};

// ---------- drivers: each returns async (code) => {status, value} ----------
function makeHeadless(executor) {
  const config = { tools: { codeMode: { enabled: true, executor } } };
  const catalogRef = api.createToolSearchCatalogRef();
  api.registerHeadlessToolSearchCatalog({ catalogRef, tools: [ping] });
  const ctx = { agentId: "main", config, runtimeConfig: config, sessionKey: "agent:main:bench", runId: "bench", catalogRef };
  return async (code) => {
    const r = await api.runCodeModeScriptHeadless({ ctx, code, maxToolCalls: 20 });
    return { status: r.status, value: r.value, error: r.error, code: r.code };
  };
}

function makeExec(executor) {
  const config = { tools: { codeMode: { enabled: true, executor } } };
  const core = api.createAgentHarnessToolSurfaceRuntimeCore({
    config,
    agentId: "main",
    sessionKey: "agent:main:bench",
    sessionId: "bench-session",
    runId: "bench-run",
    modelToolsEnabled: true,
    forceCodeModeControls: true,
  });
  const exec = core.compactTools([ping]).tools.find((t) => t.name === "exec");
  if (!exec) throw new Error("exec control tool was not produced");
  let seq = 0;
  return async (code) => {
    const r = (await exec.execute(`bench_call_${++seq}`, { code })).details;
    return { status: r.status, value: r.value, error: r.error, code: r.code };
  };
}

const quantile = (sorted, q) => {
  // nearest-rank
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[idx];
};
const median = (sorted) =>
  sorted.length % 2 ? sorted[(sorted.length - 1) / 2] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
const r2 = (x) => Math.round(x * 100) / 100;

console.log(
  JSON.stringify({
    info: "openclaw code mode reference bench",
    openclaw: JSON.parse(readFileSync(new URL("../package.json", DIST), "utf8")).version,
    node: process.versions.node,
    n: N,
    warmup: WARMUP,
    loadavg: loadavg().map(r2),
    entry: Object.fromEntries(Object.entries(found).map(([k, v]) => [k, `dist/${v.file}#${v.alias}`])),
  }),
);

for (const executor of EXECUTORS) {
  let firstForExecutor = true;
  for (const surface of SURFACES) {
    let run;
    const coldStart = performance.now();
    try {
      run = surface === "headless" ? makeHeadless(executor) : makeExec(executor);
      // Sanity: prove which engine ran (node:vm exposes WebAssembly, the QuickJS guest does not).
      const probe = await run("return typeof WebAssembly");
      if (probe.status !== "completed") throw new Error(`probe failed: ${probe.code}: ${probe.error}`);
      const engine = probe.value === "object" ? "node" : probe.value === "undefined" ? "quickjs" : String(probe.value);
      if (engine !== executor) throw new Error(`asked for ${executor} but guest looks like ${engine}`);
      console.log(JSON.stringify({ executor, surface, kind: "first_cell", process_cold: firstForExecutor, ms: r2(performance.now() - coldStart) }));
      firstForExecutor = false;
    } catch (error) {
      console.log(JSON.stringify({ executor, surface, error: String(error?.stack ?? error) }));
      continue;
    }
    for (const [kind, cell] of Object.entries(CELLS)) {
      const times = [];
      let failure;
      for (let i = 0; i < WARMUP + N; i++) {
        const t0 = performance.now();
        const r = await run(cell.code);
        const dt = performance.now() - t0;
        if (r.status !== "completed" || r.value !== cell.expect) {
          failure = `run ${i}: ${JSON.stringify(r)}`;
          break;
        }
        if (i >= WARMUP) times.push(dt);
      }
      if (failure) {
        console.log(JSON.stringify({ executor, surface, kind, error: failure }));
        continue;
      }
      times.sort((a, b) => a - b);
      console.log(
        JSON.stringify({
          executor,
          surface,
          kind,
          median_ms: r2(median(times)),
          p90_ms: r2(quantile(times, 0.9)),
          min_ms: r2(times[0]),
          max_ms: r2(times[times.length - 1]),
          n: times.length,
        }),
      );
    }
  }
}
// Worker pools (node executor: idle retire after 60 s) would keep the process alive.
process.exit(0);
