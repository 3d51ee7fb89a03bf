#!/usr/bin/env bash
# Create (or update) a virtualenv with neuron_inductor installed editable, plus its test and
# Hugging Face extras. Used by the README's quick-start commands and by .ci/run.
#
#   bash scripts/setup.sh [VENV_DIR] [TORCH_VERSION]     (defaults: .venv in the repository root, 2.13.0)
#
# torch is pinned (2.13.0 unless TORCH_VERSION names another version of pyproject's supported range,
# e.g. 2.14.1 for .ci/run's smoke run) and installed first: an unpinned `torch` would pull a multi-GB
# CUDA build, while 2.13.0 (CPU) satisfies `torch>=2.13` so the second install adds nothing to it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
TORCH_VERSION="${2:-2.13.0}"

PY=""
for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
        PY="$cand"
        break
    fi
done
if [ -z "$PY" ]; then
    echo "setup.sh: need Python >= 3.11 (python3.11 or newer on PATH)" >&2
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup.sh: creating $VENV with $("$PY" --version)"
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test,hf]"
echo "setup.sh: ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
