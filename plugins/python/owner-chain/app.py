"""kubewasm plugin in Python: on Pod events, log the pod's owner chain.

For each added or updated Pod it follows the controller owner references through the host's
cache (Pod -> ReplicaSet -> Deployment) and counts the ReplicaSet's pods through the built-in
`owner-uid` index (its keys: a count needs no objects), then logs one line: `owner chain
pod=... replicaset=... deployment=... siblings=N`. Built by plugins/artifacts/build.rs, or by
hand as docs/guides/python.md says from the checkout's root (the SDK on the path too):
componentize-py -d wit -w kubewasm:plugin/plugin componentize -p plugins/python/owner-chain
-p plugin-sdk/python app -o owner-chain.wasm
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import cache, logging, types

# The SDK's types and index names; importing it also gives handles its lighter finalizer.
from kubewasm_sdk import DEPLOYMENT, POD, REPLICA_SET, Index, Plugin, manifest, subscribe


def log(message: str, fields: list[tuple[str, str]]) -> None:
    logging.log(logging.Level.INFO, message, fields)


class Handler(Plugin, exports.Handler):
    def init(self, config: str) -> None:
        return None

    def describe(self) -> types.Manifest:
        return manifest(subscriptions=[subscribe(POD)], queries=[REPLICA_SET, DEPLOYMENT])

    def handle(self, event: types.Event) -> None:
        if isinstance(event, types.Event_Added):
            pod = event.value.object
        elif isinstance(event, types.Event_Updated):
            pod = event.value.new
        else:
            return None
        key = pod.key()
        try:
            # The controller of each type, from the cache, uid checked: one call into the host.
            rs = pod.owner(REPLICA_SET)
            if rs is None:
                log(
                    "owner chain",
                    [("pod", key), ("replicaset", "-"), ("deployment", "-"), ("siblings", "0")],
                )
                return None
            deployment = rs.owner(DEPLOYMENT)
            # A count needs no objects: the keys of the ReplicaSet's pods, no handles.
            siblings = cache.index_keys(POD, Index.OWNER_UID, rs.uid())
        except Err as e:
            raise Err(types.HandleError(message=f"query failed: {e.value}", retry=True))
        count = len(siblings)
        log(
            "owner chain",
            [
                ("pod", key),
                ("replicaset", rs.name()),
                ("deployment", deployment.name() if deployment is not None else "-"),
                ("siblings", str(count)),
            ],
        )
        return None
