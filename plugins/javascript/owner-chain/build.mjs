// Builds owner-chain.js into a component: node owner-chain/build.mjs OUT.wasm
// (after `npm ci` in plugins/javascript). Uses the componentize-js library call; its command
// line failed on these machines once. With WEVAL_BIN naming a weval 0.5.0 binary (the one
// scripts/setup.sh installs in target/weval), the JavaScript is compiled ahead of time: calls
// run about a fifth faster, the component is about 16 MB instead of 12.
import { componentize } from "@bytecodealliance/componentize-js";
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const out = process.argv[2];
if (!out) {
  console.error("usage: node owner-chain/build.mjs OUT.wasm");
  process.exit(2);
}
const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const { component } = await componentize({
  sourcePath: here("./owner-chain.js"),
  witPath: here("../../../wit"),
  worldName: "kubewasm:plugin/plugin",
  // The host grants no network: leave out what would import wasi:http.
  disableFeatures: ["http", "fetch-event"],
  ...aot(process.env.WEVAL_BIN),
});
await writeFile(out, component);

// componentize-js would download weval from GitHub without a binary: refuse a missing one.
function aot(weval) {
  if (!weval) return {};
  if (!existsSync(weval)) {
    console.error(`WEVAL_BIN=${weval}: no such file (scripts/setup.sh installs weval)`);
    process.exit(2);
  }
  return { enableAot: true, wevalBin: weval };
}
