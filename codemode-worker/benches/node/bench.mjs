// Runs the engine benchmark workloads (../workloads) in quickjs-wasi under Node and prints the median per workload.
// Not a criterion port: each workload runs on one fresh VM with the setup evaluated once, then timed N times,
// the same shape as benches/engine.rs. Usage: node bench.mjs [runs]
import { readFile } from "node:fs/promises";
import { QuickJS } from "quickjs-wasi";

const dir = new URL("../workloads/", import.meta.url);
const names = ["lines", "grep", "regex", "replace", "split_replaceall_match", "group_sort", "json_roundtrip", "string_build",
  "probes/json_parse", "probes/json_stringify", "probes/json_pretty", "probes/json_deep", "probes/sort_comparator",
  "probes/concat_loop", "probes/array_join", "probes/array_includes", "probes/key_churn"];
const runs = Number(process.argv[2] ?? 10);
const wasm = await WebAssembly.compile(await readFile(new URL(import.meta.resolve("quickjs-wasi/quickjs.wasm"))));
const setup = await readFile(new URL("setup.js", dir), "utf8");

for (const name of names) {
  const script = await readFile(new URL(`${name}.js`, dir), "utf8");
  const vm = await QuickJS.create({ wasm });
  vm.evalCode(setup).dispose();
  let summary;
  try {
    summary = vm.evalCode(script).consume((h) => h.toString());
  } catch (e) {
    console.log(`${name.padEnd(24)} failed: ${e.message}`);
    vm.dispose();
    continue;
  }
  const times = [];
  for (let i = 0; i < runs; i++) {
    const start = process.hrtime.bigint();
    vm.evalCode(script).dispose();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  console.log(`${name.padEnd(24)} median ${median.toFixed(2).padStart(9)} ms   (${summary})`);
  vm.dispose();
}
