// Builds {{name}}.wasm from plugin.js (about 6 s; 12 MB, it carries the engine).
import { componentize } from "@bytecodealliance/componentize-js";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const { component } = await componentize({
  sourcePath: here("./plugin.js"),
  witPath: here("./wit"),
  worldName: "kubewasm:plugin/plugin",
  // Leave out what would import wasi:http (a plugin granted no hosts cannot use it).
  disableFeatures: ["http", "fetch-event"],
});
await writeFile(here("./{{name}}.wasm"), component);
