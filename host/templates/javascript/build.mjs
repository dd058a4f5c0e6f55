// Builds {{name}}.wasm from plugin.js (about 6 s; 12 MB, it carries the engine).
//
// Built again only when what goes in changed (the project's and the SDK's JavaScript, the WIT,
// componentize-js's version): its output differs from one build to the next even from the
// same source, and every new file costs the host a fresh compilation.
import { componentize } from "@bytecodealliance/componentize-js";
import { createHash } from "node:crypto";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));

/** Every file in `dir` (and below, when `recursive`) whose name passes `keep`, sorted. */
async function files(dir, keep, recursive = false) {
  const entries = await readdir(here(dir), { recursive, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && keep(e.name))
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

const hash = createHash("sha256");
const sources = [
  ...(await files(".", (n) => n.endsWith(".js") || n.endsWith(".mjs"))),
  ...(await files("./node_modules/kubewasm-sdk", (n) => n.endsWith(".js"))),
  ...(await files("./wit", () => true, true)),
  here("./node_modules/@bytecodealliance/componentize-js/package.json"),
];
for (const path of sources) hash.update(path).update(await readFile(path));
const inputs = hash.digest("hex");
const stamp = here("./.{{name}}.wasm.inputs");
const built = await readFile(stamp, "utf8").catch(() => "");
const present = await readFile(here("./{{name}}.wasm")).then(() => true, () => false);
if (present && built === inputs) {
  console.log("{{name}}.wasm is up to date");
} else {
  const { component } = await componentize({
    sourcePath: here("./plugin.js"),
    witPath: here("./wit"),
    worldName: "kubewasm:plugin/plugin",
    // Leave out what would import wasi:http (a plugin granted no hosts cannot use it).
    disableFeatures: ["http", "fetch-event"],
  });
  await writeFile(here("./{{name}}.wasm"), component);
  await writeFile(stamp, inputs);
}
