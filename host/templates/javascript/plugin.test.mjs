// Builds the plugin and runs `kubewasm test` on its test file: `npm test` (node --test).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

// The kubewasm binary that created this project; KUBEWASM overrides it.
const KUBEWASM = process.env.KUBEWASM ?? "{{kubewasm}}";
const root = fileURLToPath(new URL(".", import.meta.url));

test("the plugin passes its test file", () => {
  const build = spawnSync("node", ["build.mjs"], { cwd: root, stdio: "inherit" });
  assert.equal(build.status, 0, "the plugin builds");
  const run = spawnSync(KUBEWASM, ["test", "tests/{{name}}.test.yaml"], { cwd: root, encoding: "utf8" });
  assert.equal(run.status, 0, run.stdout + run.stderr);
});
