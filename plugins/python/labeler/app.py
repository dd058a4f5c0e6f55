"""kubewasm plugin in Python: add a label to every pod that lacks it.

The same logic as plugins/labeler in Rust: on added or updated pods without the label, a
server-side apply of only that label, with the field manager `kubewasm/labeler-py` (the
plugin's name). Configuration (JSON): {"key": "team", "value": "unassigned", "namespaces": []}.
The write is staged during `handle` and sent when it returns, so a retried event labels once;
a write the operator did not grant raises Err(WriteError_Denied). Built by
plugins/artifacts/build.rs, or by hand from the checkout's root: componentize-py -d wit -w
kubewasm:plugin/plugin componentize -p plugins/python/labeler app -o labeler-py.wasm
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import cluster, logging, types

POD = types.Gvk(group="", version="v1", kind="Pod")
CONFIG = {"key": "team", "value": "unassigned", "namespaces": []}


def log(message: str, **fields: str) -> None:
    logging.log(logging.Level.INFO, message, list(fields.items()))


class Handler(exports.Handler):
    def init(self, config: str) -> None:
        try:
            given = json.loads(config)
        except ValueError as e:
            raise Err(f"invalid configuration: {e}")
        unknown = set(given) - set(CONFIG)
        if unknown:
            raise Err(f"invalid configuration: unknown fields {sorted(unknown)}")
        CONFIG.update(given)
        return None

    def describe(self) -> types.Manifest:
        return types.Manifest(
            subscriptions=[
                types.Subscription(gvk=POD, namespaces=CONFIG["namespaces"], label_selector=None)
            ],
            queries=[],
            indexes=[],
            resync_seconds=0,
        )

    def handle(self, event: types.Event) -> None:
        if isinstance(event, types.Event_Added):
            pod = event.value.object
        elif isinstance(event, types.Event_Updated):
            pod = event.value.new
        else:
            return None
        key, value = CONFIG["key"], CONFIG["value"]
        if pod.label(key) is not None:
            return None
        target = cluster.Target(
            gvk=pod.gvk(), namespace=pod.namespace(), name=pod.name(), subresource=None
        )
        body = json.dumps({"metadata": {"labels": {key: value}}})
        try:
            cluster.apply(target, body)
        except Err as e:
            # Denied, malformed or too large stays so; only a change of leader may help.
            retry = isinstance(e.value, cluster.WriteError_NotLeader)
            raise Err(types.HandleError(message=f"apply: {e.value.value}", retry=retry))
        log("labeling pod", pod=pod.key(), label=f"{key}={value}")
        return None
