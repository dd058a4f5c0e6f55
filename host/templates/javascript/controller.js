// {{name}}: a kubewasm controller. For every Namespace labelled `team`, keeps a ResourceQuota
// `team-quota` in it. The host makes the Namespace its controller and deletes it when a
// reconcile no longer applies it (the label went).

import { get } from "kubewasm:plugin/cache@0.5.0";
import { apply } from "kubewasm:plugin/cluster@0.5.0";
// componentize-js resolves relative paths only, and reads only files inside this folder
// (.npmrc installs the SDK as a copy, not a link): the SDK by its path.
import {
  NAMESPACE, controller, gvk, handleErrors, manifest, plugin,
} from "./node_modules/kubewasm-sdk/index.js";

const QUOTA = gvk("v1", "ResourceQuota");

export const handler = plugin({
  describe() {
    // `reconcile` is called per Namespace, once per burst of events on it or its quotas.
    // More: { finalizer: true } and `finalize`, watchLabel (docs/guides/javascript.md).
    return manifest({ controller: controller(NAMESPACE, { owns: [QUOTA] }) });
  },

  // A controller is called by key, in reconcile.
  handle() {},

  reconcile: handleErrors((key) => {
    // The object is read from the cache: gone is an answer, not an error.
    const namespace = get(NAMESPACE, undefined, key.name);
    // Nothing applied: the host deletes the quota an earlier reconcile applied.
    if (namespace === undefined || namespace.label("team") === undefined) return;
    // Server-side apply of the fields this plugin owns; a write that changes nothing is not
    // sent. A status: `Status` from kubewasm-sdk writes it only when it changed.
    const body = { metadata: { name: "team-quota" }, spec: { hard: { pods: "20" } } };
    apply({ gvk: QUOTA, namespace: key.name, name: "team-quota" }, JSON.stringify(body));
  }),
});
