"""The Python SDK's selector matches as the host's (the Rust SDK's) does, case by case:
plugin-sdk/selector-cases.json is checked by all three SDKs."""

import json
from pathlib import Path

import pytest

from sdk_module import load

ROOT = Path(__file__).resolve().parents[2]
selector = load("selector")

CASES = json.loads((ROOT / "selector-cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["selector"] or "(empty)" for c in CASES])
def test_matches_as_the_host_does(case):
    assert selector.Selector(case["selector"]).matches(case["labels"]) == case["matches"]


def test_a_malformed_selector_says_so():
    with pytest.raises(ValueError, match="invalid label selector"):
        selector.Selector("app=web,,tier=a")


LABEL_SELECTOR_CASES = json.loads((ROOT / "label-selector-cases.json").read_text())


@pytest.mark.parametrize("case", LABEL_SELECTOR_CASES, ids=[json.dumps(c["selector"]) for c in LABEL_SELECTOR_CASES])
def test_label_selector_values_read_as_the_host_reads_them(case):
    if "error" in case:
        with pytest.raises(ValueError, match=case["error"]):
            selector.Selector.from_label_selector(case["selector"])
    else:
        got = selector.Selector.from_label_selector(case["selector"]).matches(case["labels"])
        assert got == case["matches"]
