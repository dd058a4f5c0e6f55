"""kubewasm plugin in Python: warn when a Service loses its last ready pod, once per change.

The same logic as plugins/service-alert in Rust. "No ready pod now" is not an edge: every pod
update that leaves the Service empty would look like the one that emptied it. So the plugin
keeps the Services it alerted on in its `state`, which the host keeps across instances,
versions and replicas: a Warning Event `NoReadyPods` when the last ready pod goes, a Normal
Event `ReadyPodsBack` when one is back, each once. Its grant needs events.k8s.io/v1/Event
(create, patch). Built by plugins/artifacts/build.rs, or by hand from the checkout's root:
componentize-py -d wit -w kubewasm:plugin/plugin componentize -p plugins/python/service-alert
-p plugin-sdk/python app -o service-alert-py.wasm
"""

import json

from wit_world import exports
from wit_world.imports import cache, cluster, types

from kubewasm_sdk import (
    POD, SERVICE, Plugin, changed, handle_errors, log, manifest, state, subscribe,
)


def alerted(service) -> str:
    return "empty/" + service.key()


def ready(pod) -> bool:
    if pod.field("/metadata/deletionTimestamp") is not None:
        return False
    conditions = pod.field("/status/conditions")
    if conditions is None:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in json.loads(conditions.value)
    )


def check(service) -> None:
    """Alerts or clears `service` when its readiness changed since the last alert."""
    selector = service.field("/spec/selector")
    if selector is None:
        return  # Endpoints managed by hand: nothing to count.
    labels = json.loads(selector.value)
    if not labels:
        return
    text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    pods = cache.list_objects(POD, service.namespace(), text)
    ready_pods = sum(1 for pod in pods if ready(pod))
    key = alerted(service)
    was_empty = state.get(key) is not None
    if ready_pods == 0 and not was_empty:
        note = f"no ready pod among the {len(pods)} it selects"
        cluster.record_event(service, cluster.EventType.WARNING, "NoReadyPods", note)
        log.warn("service has no ready pods", service=service.key(), pods=len(pods))
        state.set(key, "1")
    elif ready_pods > 0 and was_empty:
        note = f"{ready_pods} ready pods again"
        cluster.record_event(service, cluster.EventType.NORMAL, "ReadyPodsBack", note)
        log.info("service has ready pods again", service=service.key(), ready=ready_pods)
        state.remove(key)


class Handler(Plugin, exports.Handler):
    def init(self, config: str) -> None:
        return None

    def describe(self) -> types.Manifest:
        return manifest(
            subscriptions=[
                subscribe(SERVICE),
                # Readiness, membership and deletion: other pod updates cost nothing.
                subscribe(POD, changes=[
                    "/status/conditions", "/metadata/labels", "/metadata/deletionTimestamp",
                ]),
            ],
            state=True,
        )

    @handle_errors
    def handle(self, event: types.Event) -> None:
        kind, obj = changed(event)
        if obj.gvk().kind == "Service":
            if kind == "deleted":
                state.remove(alerted(obj))
                return None
            check(obj)
            return None
        # A pod changed: every Service of its namespace.
        for service in cache.list_objects(SERVICE, obj.namespace(), None):
            check(service)
        return None

    @handle_errors
    def synced(self) -> None:
        for service in cache.list_objects(SERVICE, None, None):
            check(service)
        return None
