"""{{name}}: a kubewasm plugin. Logs each pod labelled app=web with its phase."""

from wit_world import exports
from wit_world.imports import types

from kubewasm_sdk import POD, Plugin, changed, handle_errors, log, manifest, subscribe


# `Plugin` first: it gives `synced`, `tick` and `admit` defaults (nothing, nothing, allow).
class Handler(Plugin, exports.Handler):
    def init(self, config: str) -> None:
        return None

    def describe(self) -> types.Manifest:
        # Only pods labelled app=web; the host filters in memory. More: schedules=[...],
        # state=True, admission=... (docs/guides/python.md).
        return manifest(subscriptions=[subscribe(POD, selector="app=web")])

    # Any exception leaves as a handle error the host retries (a failed query or write as
    # the Rust SDK decides), instead of a trap; `kubewasm_sdk.fail` ends with one of yours.
    @handle_errors
    def handle(self, event: types.Event) -> None:
        kind, pod = changed(event)
        if kind == "deleted":
            return None
        # The pod is a handle to the host's cached object: read what you need from it.
        phase = pod.field("/status/phase")
        phase = phase.value if isinstance(phase, types.Value_Text) else "-"
        log.info("web pod", pod=pod.key(), phase=phase)
        return None
