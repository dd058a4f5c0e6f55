"""{{name}}: a kubewasm controller. For every Namespace labelled `team`, keeps a ResourceQuota
`team-quota` in it. The host makes the Namespace its controller and deletes it when a reconcile
no longer applies it (the label went)."""

import json

from wit_world import exports
from wit_world.imports import cache, cluster, types

from kubewasm_sdk import NAMESPACE, Plugin, controller, gvk, handle_errors, manifest

QUOTA = gvk("v1", "ResourceQuota")


class Handler(Plugin, exports.Handler):
    def init(self, config: str) -> None:
        return None

    def describe(self) -> types.Manifest:
        # `reconcile` is called per Namespace, once per burst of events on it or its quotas.
        # More: finalizer=True and `finalize`, watch_label (docs/guides/python.md).
        return manifest(controller=controller(NAMESPACE, owns=[QUOTA]))

    def handle(self, event: types.Event) -> None:
        return None  # A controller is called by key, in reconcile.

    @handle_errors
    def reconcile(self, key: types.ObjectKey) -> None:
        # The object is read from the cache: gone is an answer, not an error.
        namespace = cache.get(NAMESPACE, None, key.name)
        if namespace is None or namespace.label("team") is None:
            # Nothing applied: the host deletes the quota an earlier reconcile applied.
            return None
        # Server-side apply of the fields this plugin owns; a write that changes nothing is
        # not sent. A status: kubewasm_sdk.Status writes it only when it changed.
        body = {"metadata": {"name": "team-quota"}, "spec": {"hard": {"pods": "20"}}}
        target = cluster.Target(QUOTA, key.name, "team-quota", None)
        cluster.apply(target, json.dumps(body))
        return None
