// Builds owner-chain.js into a component: node owner-chain/build.mjs OUT.wasm
// (after `npm ci` in plugins/javascript). Uses the componentize-js library call; its command
// line failed on these machines once.
import { componentize } from "@bytecodealliance/componentize-js";
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
});
await writeFile(out, component);
