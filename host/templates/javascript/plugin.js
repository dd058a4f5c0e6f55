// {{name}}: a kubewasm plugin. Logs each pod labelled app=web with its phase.

// componentize-js resolves relative paths only, and reads only files inside this folder
// (.npmrc installs the SDK as a copy, not a link): the SDK by its path.
import { POD, changed, handleErrors, log } from "./node_modules/kubewasm-sdk/index.js";

export const handler = {
  init(_config) {},

  describe() {
    // Only pods labelled app=web; the host filters in memory.
    return {
      subscriptions: [{ gvk: POD, namespaces: [], labelSelector: "app=web" }],
      queries: [],
      indexes: [],
      resyncSeconds: 0,
    };
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
};
