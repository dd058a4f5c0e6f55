// The JavaScript SDK's status helper writes what the Rust SDK's does, case by case:
// plugin-sdk/status-cases.json is checked by all four SDKs. Run: node --test
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Status, condition } from "../status.js";

const cases = JSON.parse(readFileSync(new URL("../../status-cases.json", import.meta.url)));

for (const c of cases) {
  test(`status: ${c.about}`, () => {
    const status = new Status();
    for (const cond of c.conditions ?? []) status.condition(cond);
    for (const [name, value] of Object.entries(c.fields ?? {})) status.field(name, value);
    assert.deepEqual(status.changes(c.status, c.now), c.apply);
  });
}

test("conditions are written as Kubernetes writes them", () => {
  assert.deepEqual(condition("Ready", null, "Starting"), {
    type: "Ready", status: "Unknown", reason: "Starting", message: "",
  });
  assert.equal(condition("Ready", true, "", "", { observedGeneration: 3 }).observedGeneration, 3);
});

test("a condition set twice is kept once", () => {
  const s = new Status().condition(condition("Ready", false)).condition(condition("Ready", true));
  assert.deepEqual(s.changes(null, "t").conditions.map((c) => c.status), ["True"]);
});
