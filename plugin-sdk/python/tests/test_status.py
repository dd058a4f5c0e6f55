"""The Python SDK's status helper writes what the Rust SDK's does, case by case:
plugin-sdk/status-cases.json is checked by all four SDKs."""

import json
import re
from pathlib import Path

import pytest

from sdk_module import load

ROOT = Path(__file__).resolve().parents[2]
status = load("status")

CASES = json.loads((ROOT / "status-cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["about"] for c in CASES])
def test_writes_what_the_other_sdks_write(case):
    s = status.Status()
    for c in case.get("conditions", []):
        s.condition(c)
    for name, value in case.get("fields", {}).items():
        s.field(name, value)
    assert s.changes(case["status"], case["now"]) == case["apply"]


def test_conditions_are_written_as_kubernetes_writes_them():
    assert status.condition("Ready", None, "Starting") == {
        "type": "Ready", "status": "Unknown", "reason": "Starting", "message": "",
    }
    assert status.condition("Ready", True, observed_generation=3)["observedGeneration"] == 3
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status._now())


def test_a_condition_set_twice_is_kept_once():
    s = status.Status().condition(status.condition("Ready", False)).condition(
        status.condition("Ready", True))
    assert [c["status"] for c in s.changes(None, "t")["conditions"]] == ["True"]
