// kubewasm plugin in JavaScript: on Pod events, log the pod's owner chain.
//
// For each added or updated Pod it follows the controller owner references through the host's
// cache (Pod -> ReplicaSet -> Deployment) and counts the ReplicaSet's pods through the built-in
// `owner-uid` index, then logs one line: `owner chain pod=... replicaset=... deployment=...
// siblings=N`. Build: node build.mjs (componentize-js against ../../../wit).

import { get, byIndex } from "kubewasm:plugin/cache@0.1.0";
import { log } from "kubewasm:plugin/logging@0.1.0";

const POD = { group: "", version: "v1", kind: "Pod" };
const REPLICA_SET = { group: "apps", version: "v1", kind: "ReplicaSet" };
const DEPLOYMENT = { group: "apps", version: "v1", kind: "Deployment" };

// The controlling owner of `obj` of type `gvk`, from the cache (uid checked).
function owner(obj, gvk) {
  const ref = obj.ownerReferences.find((r) => r.kind === gvk.kind && r.controller);
  if (!ref) return undefined;
  const found = get(gvk, obj.namespace, ref.name);
  return found && found.uid === ref.uid ? found : undefined;
}

function info(message, fields) {
  log("info", message, Object.entries(fields));
}

export const handler = {
  init(_config) {},

  describe() {
    return {
      subscriptions: [{ gvk: POD, namespaces: [], labelSelector: undefined }],
      queries: [REPLICA_SET, DEPLOYMENT],
      indexes: [],
      resyncSeconds: 0,
    };
  },

  handle(event) {
    let pod;
    if (event.tag === "added") pod = event.val.object;
    else if (event.tag === "updated") pod = event.val.new;
    else return;
    const key = `${pod.namespace}/${pod.name}`;
    const rs = owner(pod, REPLICA_SET);
    if (!rs) {
      info("owner chain", { pod: key, replicaset: "-", deployment: "-", siblings: "0" });
      return;
    }
    const deployment = owner(rs, DEPLOYMENT);
    const siblings = byIndex(POD, "owner-uid", rs.uid);
    info("owner chain", {
      pod: key,
      replicaset: rs.name,
      deployment: deployment ? deployment.name : "-",
      siblings: String(siblings.length),
    });
  },
};
