"""kubewasm plugin in Python: add a label to every pod that lacks it.

The same logic as plugins/labeler in Rust: on added or updated pods without the label, a
server-side apply of only that label, with the field manager `kubewasm/labeler-py` (the
plugin's name). Configuration (JSON): {"key": "team", "value": "unassigned", "namespaces": []}.
The write is staged during `handle` and sent when it returns, so a retried event labels once;
a write the operator did not grant raises Err(WriteError_Denied), which the SDK's
`handle_errors` gives up (as the Rust SDK does). Built by plugins/artifacts/build.rs, or by
hand from the checkout's root: componentize-py -d wit -w kubewasm:plugin/plugin componentize
-p plugins/python/labeler -p plugin-sdk/python app -o labeler-py.wasm
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import cluster, types

from kubewasm_sdk import POD, Plugin, changed, handle_errors, log, manifest, subscribe

CONFIG = {"key": "team", "value": "unassigned", "namespaces": []}


class Handler(Plugin, exports.Handler):
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
        return manifest(subscriptions=[subscribe(POD, namespaces=CONFIG["namespaces"])])

    # A refused write (or any other exception) leaves as a handle error: denied, malformed
    # or too large is given up; only a change of leader is retried.
    @handle_errors
    def handle(self, event: types.Event) -> None:
        kind, pod = changed(event)
        if kind not in ("added", "updated"):
            return None
        key, value = CONFIG["key"], CONFIG["value"]
        if pod.label(key) is not None:
            return None
        target = cluster.Target(
            gvk=pod.gvk(), namespace=pod.namespace(), name=pod.name(), subresource=None
        )
        body = json.dumps({"metadata": {"labels": {key: value}}})
        cluster.apply(target, body)
        log.info("labeling pod", pod=pod.key(), label=f"{key}={value}")
        return None
