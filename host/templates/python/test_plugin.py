"""Builds the plugin and runs `kubewasm test` on its test file: `pytest` (or `python3 test_plugin.py`)."""

import os
import subprocess
from pathlib import Path

# The kubewasm binary that created this project; KUBEWASM overrides it.
KUBEWASM = os.environ.get("KUBEWASM", "{{kubewasm}}")
ROOT = Path(__file__).resolve().parent


def test_the_plugin_passes_its_test_file():
    subprocess.run(["bash", "build.sh"], cwd=ROOT, check=True)
    out = subprocess.run([KUBEWASM, "test", "tests/{{name}}.test.yaml"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


if __name__ == "__main__":
    test_the_plugin_passes_its_test_file()
    print("ok")
