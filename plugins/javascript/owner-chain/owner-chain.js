// kubewasm plugin in JavaScript: on Pod events, log the pod's owner chain.
//
// For each added or updated Pod it follows the controller owner references through the host's
// cache (Pod -> ReplicaSet -> Deployment) and counts the ReplicaSet's pods through the built-in
// `owner-uid` index (its keys: a count needs no objects), then logs one line: `owner chain
// pod=... replicaset=... deployment=... siblings=N`. Build: node build.mjs (componentize-js
// against ../../../wit).

import { indexKeys } from "kubewasm:plugin/cache@0.5.0";
import { log } from "kubewasm:plugin/logging@0.5.0";

const POD = { group: "", version: "v1", kind: "Pod" };
const REPLICA_SET = { group: "apps", version: "v1", kind: "ReplicaSet" };
const DEPLOYMENT = { group: "apps", version: "v1", kind: "Deployment" };

export const handler = {
  init(_config) {},

  describe() {
    return {
      subscriptions: [
        {
          gvk: POD,
          namespaces: [],
          labelSelector: undefined,
          changes: [],
          fields: [],
          metadataOnly: false,
        },
      ],
      queries: [REPLICA_SET, DEPLOYMENT],
      indexes: [],
      resyncSeconds: 0,
      schedules: [],
      state: false,
      admission: undefined,
      controller: undefined,
      metrics: [],
    };
  },

  // Called after the initial state, on schedules, for admission and for a controller's
  // keys: nothing to do here (this plugin declares no controller).
  synced() {},
  tick(_schedule) {},
  admit(_request) {
    return { allowed: true, message: "", code: 0, mutation: undefined, warnings: [] };
  },
  reconcile(_key) {},
  finalize(_key) {},

  handle(event) {
    let pod;
    if (event.tag === "added") pod = event.val.object;
    else if (event.tag === "updated") pod = event.val.new;
    else return;
    const key = pod.key();
    // The controller of each type, from the cache, uid checked: one call into the host.
    const rs = pod.owner(REPLICA_SET);
    if (!rs) {
      log("info", "owner chain", [
        ["pod", key],
        ["replicaset", "-"],
        ["deployment", "-"],
        ["siblings", "0"],
      ]);
      return;
    }
    const deployment = rs.owner(DEPLOYMENT);
    // A count needs no objects: the keys of the ReplicaSet's pods, no handles.
    const count = indexKeys(POD, "owner-uid", rs.uid()).length;
    // The log's fields as key and value pairs, as the contract takes them.
    log("info", "owner chain", [
      ["pod", key],
      ["replicaset", rs.name()],
      ["deployment", deployment ? deployment.name() : "-"],
      ["siblings", String(count)],
    ]);
    // Owned handles go back to the host when disposed; the garbage collector never returns
    // them (docs/guides/javascript.md says why).
    rs[Symbol.dispose]();
    deployment?.[Symbol.dispose]();
  },
};
