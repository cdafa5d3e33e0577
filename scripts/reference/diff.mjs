// The reference's side of the differential run (scripts/reference/diff.sh): runs each case of cases.json through the
// model-facing `exec` (and `wait`) tools of OpenClaw 2026.9.6 and prints one JSON line per case with the fields the
// comparison reads: status, value, code, reason, error. Run it with `scripts/reference/run.sh diff [--executor
// quickjs|node]`. The host tools (ping, echo, fail) are the ones diff.py gives codemode.
import { readFileSync } from "node:fs";
import { controlTools, version } from "./openclaw.mjs";

const args = process.argv.slice(2);
const at = args.indexOf("--executor");
const executor = at >= 0 ? args[at + 1] : "quickjs";

const object = { type: "object", properties: {}, additionalProperties: true };
const reply = (value) => ({ content: [{ type: "text", text: JSON.stringify(value) }], details: value });
const tools = [
  { name: "ping", label: "ping", description: "Return {ok: true}.", parameters: object, execute: async () => reply({ ok: true }) },
  { name: "echo", label: "echo", description: "Return its arguments.", parameters: object, execute: async (_id, p) => reply(p) },
  {
    name: "fail",
    label: "fail",
    description: "Always fail.",
    parameters: object,
    execute: async () => {
      throw new Error("boom");
    },
  },
];

const { exec, wait } = controlTools(executor, tools);
const cases = JSON.parse(readFileSync(new URL("./cases.json", import.meta.url), "utf8"));
let seq = 0;
const shape = (details) => ({
  status: details.status,
  value: details.value,
  code: details.code,
  reason: details.reason,
  error: details.error,
});
console.log(JSON.stringify({ side: "openclaw", version, executor, node: process.versions.node }));
for (const c of cases) {
  let details;
  try {
    if (c.wait) {
      details = (await wait.execute(`diff_${++seq}`, { runId: c.wait })).details;
    } else {
      details = (await exec.execute(`diff_${++seq}`, { code: c.code })).details;
      if (c.then === "wait" && details.status === "waiting") {
        details = (await wait.execute(`diff_${++seq}`, { runId: details.runId })).details;
      }
    }
    console.log(JSON.stringify({ name: c.name, ...shape(details) }));
  } catch (error) {
    console.log(JSON.stringify({ name: c.name, status: "thrown", error: String(error?.message ?? error) }));
  }
}
process.exit(0);
