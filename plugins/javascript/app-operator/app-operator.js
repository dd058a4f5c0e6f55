// kubewasm plugin in JavaScript: an operator for the `App` custom resource, the same as
// plugins/python/app-operator (read its header for the whole story).
//
// For every `App` (`demo.kubewasm.dev/v1`, `spec: {image, replicas, port}`) it keeps a
// Deployment, a Service and a PodDisruptionBudget of the same name, owned by the App and pruned
// by the host; the App's status gets `readyReplicas` and an `Available` condition copied from
// the Deployment's, written only when they change. The namespace's ConfigMap `app-registry`
// lists every live App's URL; the App holds the plugin's finalizer, and `finalize` removes its
// entry before the host lets it go. Built by plugins/artifacts/build.rs.

import { get, listObjects } from "kubewasm:plugin/cache@0.5.0";
import { apply, mergePatch } from "kubewasm:plugin/cluster@0.5.0";
import {
  CONFIG_MAP, DEPLOYMENT, Status, condition, controller, gvk, handleErrors, log, manifest,
  plugin,
} from "../../../plugin-sdk/javascript/index.js";

const APP = gvk("demo.kubewasm.dev/v1", "App");
const SERVICE = gvk("v1", "Service");
const PDB = gvk("policy/v1", "PodDisruptionBudget");
const REGISTRY = "app-registry";

// The Deployment, Service and PodDisruptionBudget of App `name`: type and owned fields.
function children(name, spec) {
  const labels = { "app.kubernetes.io/name": name };
  const port = Number(spec.port ?? 8080);
  return [
    [DEPLOYMENT, { spec: {
      replicas: Number(spec.replicas ?? 1),
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: { containers: [{ name: "app", image: spec.image, ports: [{ containerPort: port }] }] },
      },
    } }],
    [SERVICE, { spec: { selector: labels, ports: [{ port, targetPort: port }] } }],
    [PDB, { spec: { maxUnavailable: 1, selector: { matchLabels: labels } } }],
  ];
}

const target = (gvk, namespace, name, subresource) => ({ gvk, namespace, name, subresource });

// The namespace's registry: every App of it that is not being deleted, by name.
function writeRegistry(namespace) {
  const data = {};
  for (const app of listObjects(APP, namespace, undefined)) {
    if (app.field("/metadata/deletionTimestamp") === undefined) {
      const port = app.field("/spec/port")?.val ?? 8080;
      data[app.name()] = `http://${app.name()}.${namespace}.svc:${port}`;
    }
    app[Symbol.dispose]();
  }
  apply(target(CONFIG_MAP, namespace, REGISTRY), JSON.stringify({ metadata: { name: REGISTRY }, data }));
}

// The App's `Available` condition, from its Deployment's.
function available(deployment) {
  const value = deployment?.field("/status/conditions");
  for (const c of value === undefined ? [] : JSON.parse(value.val)) {
    if (c.type === "Available") {
      const holds = c.status === "True" ? true : c.status === "False" ? false : null;
      return condition("Available", holds, c.reason ?? "", c.message ?? "");
    }
  }
  return condition("Available", null, "Pending", "the Deployment has not reported yet");
}

export const handler = plugin({
  describe: () => manifest({
    controller: controller(APP, { owns: [DEPLOYMENT, SERVICE, PDB], finalizer: true }),
    queries: [CONFIG_MAP], // the registry, read in finalize
  }),

  // A controller is called by key (reconcile), not by event.
  handle: () => {},

  reconcile: handleErrors((key) => {
    const app = get(APP, key.namespace, key.name);
    // Gone: its children go with it, its registry entry went in finalize. Being deleted:
    // finalize's turn.
    if (app === undefined || app.field("/metadata/deletionTimestamp") !== undefined) return;
    const spec = JSON.parse(app.field("/spec").val);
    const generation = Number(app.field("/metadata/generation")?.val ?? 0);
    if (!spec.image) {
      new Status().condition(condition("Available", false, "InvalidSpec", "spec.image is required",
        { observedGeneration: generation })).apply(app);
      return;
    }
    for (const [gvk, fields] of children(key.name, spec)) {
      apply(target(gvk, key.namespace, key.name), JSON.stringify({ ...fields, metadata: { name: key.name } }));
    }
    writeRegistry(key.namespace);
    const deployment = get(DEPLOYMENT, key.namespace, key.name);
    const ready = deployment?.field("/status/readyReplicas")?.val ?? 0;
    const cond = { ...available(deployment), observedGeneration: generation };
    const written = new Status().condition(cond).field("readyReplicas", Number(ready)).apply(app);
    log.info("app reconciled", {
      app: `${key.namespace}/${key.name}`, available: cond.status, status_written: String(written),
    });
  }),

  finalize: handleErrors((key) => {
    // A merge patch names the entry to remove (the manifests folder's apply only merges).
    const registry = get(CONFIG_MAP, key.namespace, REGISTRY);
    if (registry !== undefined) {
      registry[Symbol.dispose]();
      const body = JSON.stringify({ data: { [key.name]: null } });
      mergePatch(target(CONFIG_MAP, key.namespace, REGISTRY), body);
    }
    log.info("app unregistered", { app: `${key.namespace}/${key.name}` });
  }),
});
