// The JavaScript SDK's selector matches as the host's (the Rust SDK's) does, case by case:
// plugin-sdk/selector-cases.json is checked by all three SDKs. Run: node --test
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Selector } from "../selector.js";

const cases = JSON.parse(readFileSync(new URL("../../selector-cases.json", import.meta.url)));

for (const c of cases) {
  test(`selector ${JSON.stringify(c.selector)} on ${JSON.stringify(c.labels)}`, () => {
    assert.equal(new Selector(c.selector).matches(c.labels), c.matches);
  });
}

test("a malformed selector says so", () => {
  assert.throws(() => new Selector("app=web,,tier=a"), /invalid label selector/);
});

const labelSelectorCases = JSON.parse(
  readFileSync(new URL("../../label-selector-cases.json", import.meta.url)),
);

for (const c of labelSelectorCases) {
  test(`label selector ${JSON.stringify(c.selector)} on ${JSON.stringify(c.labels)}`, () => {
    if (c.error) {
      assert.throws(() => Selector.fromLabelSelector(c.selector), new RegExp(c.error));
    } else {
      assert.equal(Selector.fromLabelSelector(c.selector).matches(c.labels), c.matches);
    }
  });
}
