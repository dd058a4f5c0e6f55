"""Loads one module of the SDK by its path: the package itself imports componentize-py's
generated bindings, which the machine's own CPython does not have."""

import importlib.util
from pathlib import Path

SDK = Path(__file__).resolve().parents[1] / "kubewasm_sdk"


def load(name: str):
    """The SDK's module `name` (`selector`, `status`, `_handles`), run on its own."""
    spec = importlib.util.spec_from_file_location(f"kubewasm_sdk_{name}", SDK / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
