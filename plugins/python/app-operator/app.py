"""kubewasm plugin in Python: an operator for the `App` custom resource.

For every `App` (`demo.kubewasm.dev/v1`, `spec: {image, replicas, port}`) it keeps a
Deployment, a Service and a PodDisruptionBudget of the same name. The host makes the App their
controller, labels them with its apply set and deletes those a reconcile no longer applies. The
App's status says how it went: `readyReplicas` and an `Available` condition copied from the
Deployment's (the real deployment controller writes that), with the App's generation; the SDK's
`Status` writes it only when it changed, so a reconcile that finds all as it was writes nothing.

The namespace's registry, the ConfigMap `app-registry` (one entry per live App: its in-cluster
URL), stands for a system outside the cluster that must forget an App before it goes: the App
holds the plugin's finalizer, and `finalize` removes its entry; only then does the host let the
App go. A reconcile applies the whole registry, worked out from the cache (every App of the
namespace not being deleted), so a retried or repeated call writes the same thing.

Grants: patch (apply) on apps/v1 Deployment, v1 Service, policy/v1 PodDisruptionBudget and v1
ConfigMap, delete on the first three (pruning), patch on the App and its status subresource; it
reads those types and the App. The same
operator in JavaScript: plugins/javascript/app-operator. Built by plugins/artifacts/build.rs.
"""

import json

from wit_world import exports
from wit_world.imports import cache, cluster, types

from kubewasm_sdk import (
    CONFIG_MAP, DEPLOYMENT, Plugin, Status, condition, controller, gvk, handle_errors, log,
    manifest,
)

APP = gvk("demo.kubewasm.dev/v1", "App")
SERVICE = gvk("v1", "Service")
PDB = gvk("policy/v1", "PodDisruptionBudget")
REGISTRY = "app-registry"


def children(name: str, spec: dict) -> list:
    """The Deployment, Service and PodDisruptionBudget of App `name`: type and owned fields."""
    labels = {"app.kubernetes.io/name": name}
    port = int(spec.get("port", 8080))
    return [
        (DEPLOYMENT, {"spec": {
            "replicas": int(spec.get("replicas", 1)),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": "app", "image": spec["image"],
                    "ports": [{"containerPort": port}],
                }]},
            },
        }}),
        (SERVICE, {"spec": {"selector": labels, "ports": [{"port": port, "targetPort": port}]}}),
        (PDB, {"spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}),
    ]


def target(resource, namespace, name, subresource=None):
    return cluster.Target(resource, namespace, name, subresource)


def write_registry(namespace: str) -> None:
    """The namespace's registry: every App of it that is not being deleted, by name."""
    entries = {}
    for app in cache.list_objects(APP, namespace, None):
        if app.field("/metadata/deletionTimestamp") is None:
            port = app.field("/spec/port")
            port = port.value if port is not None else 8080
            entries[app.name()] = f"http://{app.name()}.{namespace}.svc:{port}"
    body = {"metadata": {"name": REGISTRY}, "data": entries}
    cluster.apply(target(CONFIG_MAP, namespace, REGISTRY), json.dumps(body))


def available(deployment) -> dict:
    """The App's `Available` condition, from its Deployment's."""
    if deployment is not None:
        value = deployment.field("/status/conditions")
        for c in json.loads(value.value) if value is not None else []:
            if c.get("type") == "Available":
                holds = {"True": True, "False": False}.get(c.get("status"))
                return condition("Available", holds, c.get("reason", ""), c.get("message", ""))
    return condition("Available", None, "Pending", "the Deployment has not reported yet")


class Handler(Plugin, exports.Handler):
    def init(self, config: str) -> None:
        return None

    def describe(self) -> types.Manifest:
        return manifest(
            controller=controller(APP, owns=[DEPLOYMENT, SERVICE, PDB], finalizer=True),
            queries=[CONFIG_MAP],  # the registry, read in finalize
        )

    def handle(self, event: types.Event) -> None:
        return None  # A controller is called by key (reconcile), not by event.

    @handle_errors
    def reconcile(self, key: types.ObjectKey) -> None:
        app = cache.get(APP, key.namespace, key.name)
        if app is None:
            return None  # Gone: its children go with it, its registry entry went in finalize.
        if app.field("/metadata/deletionTimestamp") is not None:
            return None  # Being deleted: finalize's turn.
        spec = json.loads(app.field("/spec").value)
        generation = app.field("/metadata/generation")
        generation = generation.value if generation is not None else 0
        if not spec.get("image"):
            Status().condition(condition(
                "Available", False, "InvalidSpec", "spec.image is required",
                observed_generation=generation,
            )).apply(app)
            return None
        for resource, fields in children(key.name, spec):
            fields["metadata"] = {"name": key.name}
            cluster.apply(target(resource, key.namespace, key.name), json.dumps(fields))
        write_registry(key.namespace)
        deployment = cache.get(DEPLOYMENT, key.namespace, key.name)
        ready = deployment.field("/status/readyReplicas") if deployment is not None else None
        cond = available(deployment)
        cond["observedGeneration"] = generation
        changed = Status().condition(cond).field(
            "readyReplicas", ready.value if ready is not None else 0,
        ).apply(app)
        log.info("app reconciled", app=key.namespace + "/" + key.name,
                 available=cond["status"], status_written=str(changed).lower())
        return None

    @handle_errors
    def finalize(self, key: types.ObjectKey) -> None:
        # A merge patch names the entry to remove (apply would, too, on a server, which
        # removes what its manager no longer applies; the manifests folder only merges).
        if cache.get(CONFIG_MAP, key.namespace, REGISTRY) is not None:
            body = {"data": {key.name: None}}
            cluster.merge_patch(target(CONFIG_MAP, key.namespace, REGISTRY), json.dumps(body))
        log.info("app unregistered", app=key.namespace + "/" + key.name)
        return None
