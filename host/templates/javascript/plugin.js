// {{name}}: a kubewasm plugin. Logs each pod labelled app=web with its phase.

// componentize-js resolves relative paths only, and reads only files inside this folder
// (.npmrc installs the SDK as a copy, not a link): the SDK by its path.
import {
  POD, changed, handleErrors, log, manifest, plugin, subscribe,
} from "./node_modules/kubewasm-sdk/index.js";

// `plugin` gives `synced`, `tick` and `admit` defaults (nothing, nothing, allow).
export const handler = plugin({
  describe() {
    // Only pods labelled app=web; the host filters in memory. More: schedules, state,
    // admission (docs/guides/javascript.md).
    return manifest({ subscriptions: [subscribe(POD, { selector: "app=web" })] });
  },

  // Whatever it throws leaves as a handle error the host retries (a failed query or write as
  // the Rust SDK decides); `fail(message, { retry })` from kubewasm-sdk ends with one of yours.
  handle: handleErrors((event) => {
    const [kind, pod] = changed(event);
    if (kind === "deleted") return;
    // The pod is a handle to the host's cached object: read what you need from it.
    const phase = pod.field("/status/phase");
    log.info("web pod", { pod: pod.key(), phase: phase?.tag === "text" ? phase.val : "-" });
  }),
});
