"""Saying how an object is on its status: conditions and fields, written only when they change.

A reconcile states the whole status it owns every time (``Status().condition(...).field(...)``);
``Status.apply(obj)`` compares it with the object as cached and stages a server-side apply of
the ``status`` subresource (the plugin's field manager) only when a value differs, so a
reconcile that finds everything as it was writes nothing and wakes nothing: no status loop. A
condition keeps its ``lastTransitionTime`` while its ``status`` stays the same. Apply names
every field the plugin owns, so one left out of a later apply is removed: state all of them
each time. The rules, shared by the four SDKs, are checked against
``plugin-sdk/status-cases.json``. This module needs no bindings but for ``Status.apply``.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any, Optional


def condition(
    type: str,
    status: Optional[bool],
    reason: str = "",
    message: str = "",
    observed_generation: Optional[int] = None,
) -> dict:
    """A condition as Kubernetes' API conventions write it: ``status`` True, False or None
    (``Unknown``); ``observed_generation``, the ``metadata.generation`` it was worked out from
    (leave it out for types whose conditions have none, such as a Namespace's)."""
    text = {True: "True", False: "False", None: "Unknown"}.get(status, status)
    out = {"type": type, "status": text, "reason": reason, "message": message}
    if observed_generation is not None:
        out["observedGeneration"] = observed_generation
    return out


def _same(want: dict, current: dict) -> bool:
    return (
        current.get("status") == want["status"]
        and current.get("reason", "") == want.get("reason", "")
        and current.get("message", "") == want.get("message", "")
        and (
            want.get("observedGeneration") is None
            or current.get("observedGeneration") == want["observedGeneration"]
        )
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Status:
    """The status a plugin owns on one object: its conditions and other fields."""

    def __init__(self) -> None:
        self.conditions: list = []
        self.fields: dict = {}

    def condition(self, value: dict) -> "Status":
        """Sets a condition (from ``condition(...)``), replacing one of the same type."""
        self.conditions = [c for c in self.conditions if c["type"] != value["type"]]
        self.conditions.append(dict(value))
        return self

    def field(self, name: str, value: Any) -> "Status":
        """Sets the top-level status field ``name`` (``readyReplicas``, ``url``) to ``value``."""
        self.fields[name] = value
        return self

    def changes(self, current: Optional[dict], now: str) -> Optional[dict]:
        """The status to apply over ``current`` (the object's ``status``, None when it has
        none) at ``now`` (RFC 3339), or None when ``current`` already says all of it."""
        current = current if isinstance(current, dict) else {}
        had = current.get("conditions")
        had = had if isinstance(had, list) else []

        def find(kind):
            return next((c for c in had if isinstance(c, dict) and c.get("type") == kind), None)

        same = all(name in current and current[name] == value
                   for name, value in self.fields.items()) and all(
            find(c["type"]) is not None and _same(c, find(c["type"])) for c in self.conditions)
        if same:
            return None
        out = copy.deepcopy(self.fields)
        if self.conditions:
            written = []
            for c in self.conditions:
                old = find(c["type"])
                since = now
                if old is not None and old.get("status") == c["status"]:
                    since = old.get("lastTransitionTime") or now
                written.append({**c, "lastTransitionTime": since})
            out["conditions"] = written
        return out

    def apply(self, obj: Any) -> bool:
        """Stages a server-side apply of this status to ``obj``'s ``status`` subresource unless
        the object, as cached, already has it; whether a write was staged. The object must be
        read whole or with ``/status`` among its declared fields. A refused write raises, as
        ``cluster.apply`` does."""
        from wit_world.imports import cluster, types

        value = obj.field("/status")
        current = json.loads(value.value) if isinstance(value, types.Value_Json) else None
        status = self.changes(current, _now())
        if status is None:
            return False
        target = cluster.Target(obj.gvk(), obj.namespace(), obj.name(), "status")
        cluster.apply(target, json.dumps({"status": status}))
        return True
