// kubewasm plugin in JavaScript: warn when a Service loses its last ready pod, once per change.
//
// The same logic as plugins/service-alert in Rust. "No ready pod now" is not an edge: every
// pod update that leaves the Service empty would look like the one that emptied it. So the
// plugin keeps the Services it alerted on in its `state`, which the host keeps across
// instances, versions and replicas: a Warning Event `NoReadyPods` when the last ready pod
// goes, a Normal Event `ReadyPodsBack` when one is back, each once. Its grant needs
// events.k8s.io/v1/Event (create, patch). Build: node service-alert/build.mjs OUT.wasm.

import { listObjects } from "kubewasm:plugin/cache@0.5.0";
import { recordEvent } from "kubewasm:plugin/cluster@0.5.0";
import {
  POD, SERVICE, changed, handleErrors, log, manifest, plugin, state, subscribe,
} from "../../../plugin-sdk/javascript/index.js";

const alerted = (service) => `empty/${service.key()}`;

function ready(pod) {
  if (pod.field("/metadata/deletionTimestamp") !== undefined) return false;
  const conditions = pod.field("/status/conditions");
  if (conditions === undefined) return false;
  return JSON.parse(conditions.val).some((c) => c.type === "Ready" && c.status === "True");
}

// Alerts or clears `service` when its readiness changed since the last alert.
function check(service) {
  const selector = service.field("/spec/selector");
  if (selector === undefined) return; // Endpoints managed by hand: nothing to count.
  const labels = Object.entries(JSON.parse(selector.val)).sort();
  if (labels.length === 0) return;
  const text = labels.map(([k, v]) => `${k}=${v}`).join(",");
  const pods = listObjects(POD, service.namespace(), text);
  const readyPods = pods.filter(ready).length;
  const total = pods.length;
  for (const pod of pods) pod[Symbol.dispose]();
  const key = alerted(service);
  const wasEmpty = state.get(key) !== undefined;
  if (readyPods === 0 && !wasEmpty) {
    recordEvent(service, "warning", "NoReadyPods", `no ready pod among the ${total} it selects`);
    log.warn("service has no ready pods", { service: service.key(), pods: String(total) });
    state.set(key, "1");
  } else if (readyPods > 0 && wasEmpty) {
    recordEvent(service, "normal", "ReadyPodsBack", `${readyPods} ready pods again`);
    log.info("service has ready pods again", { service: service.key(), ready: String(readyPods) });
    state.remove(key);
  }
}

function checkAll(namespace) {
  for (const service of listObjects(SERVICE, namespace, undefined)) {
    check(service);
    service[Symbol.dispose]();
  }
}

export const handler = plugin({
  describe() {
    return manifest({
      subscriptions: [
        subscribe(SERVICE),
        // Readiness, membership and deletion: other pod updates cost nothing.
        subscribe(POD, {
          changes: ["/status/conditions", "/metadata/labels", "/metadata/deletionTimestamp"],
        }),
      ],
      state: true,
    });
  },

  handle: handleErrors((event) => {
    const [kind, object] = changed(event);
    if (object.gvk().kind === "Service") {
      if (kind === "deleted") state.remove(alerted(object));
      else check(object);
      return;
    }
    // A pod changed: every Service of its namespace.
    checkAll(object.namespace());
  }),

  synced: handleErrors(() => checkAll(undefined)),
});
