"""Kubernetes label selectors, parsed and matched as the host matches them (the Rust SDK's
``selector`` module): comma-separated requirements, each ``key``, ``!key``, ``key=value``,
``key==value``, ``key!=value``, ``key in (a,b)`` or ``key notin (a,b)``; ``!=`` and ``notin``
also match objects without the key."""

from __future__ import annotations

import re
from typing import Mapping

_SET = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")
_KEY = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


class Selector:
    """A parsed label selector: ``Selector("app=web,tier in (a,b)").matches(labels)``."""

    def __init__(self, text: str = "") -> None:
        self.requirements = []
        for part in _split(text):
            if not part.strip():
                raise ValueError(f"invalid label selector {text!r}: empty requirement")
            m = _SET.match(part)
            if m:
                values = {v.strip() for v in m.group(3).split(",") if v.strip()}
                self.requirements.append((m.group(1), m.group(2), values))
                continue
            m = _EQ.match(part)
            if m:
                op = "notin" if m.group(2) == "!=" else "in"
                self.requirements.append((m.group(1), op, {m.group(3)}))
                continue
            m = _KEY.match(part)
            if m:
                self.requirements.append((m.group(2), "absent" if m.group(1) else "exists", set()))
                continue
            raise ValueError(f"invalid label selector {text!r}: cannot read {part.strip()!r}")

    @classmethod
    def from_label_selector(cls, value: Mapping) -> "Selector":
        """A selector from a Kubernetes ``LabelSelector`` value (``matchLabels`` and
        ``matchExpressions``), as in ``spec.selector`` of Deployments and ReplicaSets."""
        selector = cls()
        for key, label in (value.get("matchLabels") or {}).items():
            if not isinstance(label, str):
                raise ValueError(f"matchLabels.{key} is not a string")
            selector.requirements.append((key, "in", {label}))
        operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "absent"}
        for expression in value.get("matchExpressions") or []:
            key = expression.get("key")
            if not isinstance(key, str):
                raise ValueError("matchExpressions[].key is missing")
            op = operators.get(expression.get("operator"))
            if op is None:
                raise ValueError(f"matchExpressions[].operator {expression.get('operator')!r} is not In, NotIn, Exists or DoesNotExist")
            values = {v for v in expression.get("values") or [] if isinstance(v, str)}
            selector.requirements.append((key, op, values))
        return selector

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` (a dict, or a list of pairs) meets every requirement."""
        if not isinstance(labels, Mapping):
            labels = dict(labels)
        for key, op, values in self.requirements:
            value = labels.get(key)
            if op == "exists" and value is None:
                return False
            if op == "absent" and value is not None:
                return False
            if op == "in" and value not in values:
                return False
            if op == "notin" and value is not None and value in values:
                return False
        return True


def _split(text: str) -> list:
    """``text`` split at the commas outside parentheses; empty for an empty selector."""
    if not text.strip():
        return []
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
