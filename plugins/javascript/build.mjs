// Builds one of the checkout's JavaScript plugins into a component:
//   node plugins/javascript/build.mjs plugins/javascript/owner-chain/owner-chain.js OUT.wasm
// Run it from the checkout's root (after `npm ci` in plugins/javascript): componentize-js maps
// the working folder as the component's root, so plugins can import the SDK by relative path.
// Uses the componentize-js library call; its command line failed on these machines once. With
// WEVAL_BIN naming a weval 0.5.0 binary (the one scripts/setup.sh installs in target/weval), the
// JavaScript is compiled ahead of time: calls run about a fifth faster, the component is about
// 16 MB instead of 12.
import { componentize } from "@bytecodealliance/componentize-js";
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

const [source, out] = process.argv.slice(2);
if (!source || !out) {
  console.error("usage: node plugins/javascript/build.mjs SOURCE.js OUT.wasm");
  process.exit(2);
}
const { component } = await componentize({
  sourcePath: resolve(source),
  witPath: fileURLToPath(new URL("../../wit", import.meta.url)),
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
