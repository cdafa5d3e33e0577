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
// The executor is chosen by config `tools.codeMode.executor` ("node" | "quickjs"), as in the product. openclaw.mjs
// finds the functions in the installed dist.
import { loadavg } from "node:os";
import { api, controlTools, found, version } from "./openclaw.mjs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : dflt;
};
const N = Number(opt("n", 30));
const WARMUP = Number(opt("warmup", 5));
const EXECUTORS = opt("executors", "node,quickjs").split(",").filter(Boolean);
const SURFACES = opt("surfaces", "headless,exec").split(",").filter(Boolean);

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
  const { exec } = controlTools(executor, [ping]);
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
    openclaw: version,
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
