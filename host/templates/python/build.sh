#!/usr/bin/env bash
# Builds {{name}}.wasm (about 12 s; 18 MB, it carries the interpreter). componentize-py comes
# from $COMPONENTIZE_PY, else PATH (pip install componentize-py==0.25.1).
#
# Built again only when what goes in changed (the project's and the SDK's Python files, the
# WIT, componentize-py's version): its output differs from one build to the next even from the
# same source (componentize-py#247), and every new file costs the host a fresh compilation.
set -euo pipefail
cd "$(dirname "$0")"
componentize=${COMPONENTIZE_PY:-componentize-py}
inputs=$({
  "$componentize" --version
  find . "{{sdk_python}}" -name '*.py' -not -path './.venv/*' -print0 | sort -z | xargs -0 cat
  find wit -type f -print0 | sort -z | xargs -0 cat
} | sha256sum | cut -d' ' -f1)
if [[ -f {{name}}.wasm && $(cat .{{name}}.wasm.inputs 2>/dev/null) == "$inputs" ]]; then
  echo "{{name}}.wasm is up to date"
  exit 0
fi
PYTHONDONTWRITEBYTECODE=1 "$componentize" -d wit -w kubewasm:plugin/plugin componentize \
  -p . -p "{{sdk_python}}" app -o {{name}}.wasm
echo "$inputs" >.{{name}}.wasm.inputs
