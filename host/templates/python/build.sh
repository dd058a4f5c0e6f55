#!/usr/bin/env bash
# Builds {{name}}.wasm (about 12 s; 18 MB, it carries the interpreter). componentize-py comes
# from $COMPONENTIZE_PY, else PATH (pip install componentize-py==0.25.1).
set -euo pipefail
cd "$(dirname "$0")"
componentize=${COMPONENTIZE_PY:-componentize-py}
PYTHONDONTWRITEBYTECODE=1 "$componentize" -d wit -w kubewasm:plugin/plugin componentize \
  -p . -p "{{sdk_python}}" app -o {{name}}.wasm
