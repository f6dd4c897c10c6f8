#!/usr/bin/env bash
# Creates the project's Python environment, ./.venv at the repository root (git-ignored), from
# golden/requirements.txt: the exact torch/numpy/safetensors the committed goldens were made with.
# trnconf's tests and tools find Python as $TRNCONF_PYTHON, else ./.venv/bin/python, else python3.
#
#   bash golden/setup-venv.sh                 # with python3
#   PYTHON=python3.11 bash golden/setup-venv.sh
#   PIP_ARGS='--index-url https://download.pytorch.org/whl/cpu' bash golden/setup-venv.sh  # CPU torch
set -euo pipefail
cd "$(dirname "$0")/.."
"${PYTHON:-python3}" -m venv .venv
# shellcheck disable=SC2086 # PIP_ARGS is a list of options
.venv/bin/python -m pip install ${PIP_ARGS:-} -r golden/requirements.txt
.venv/bin/python -c 'import torch, numpy, safetensors; print("torch", torch.__version__, "in", __import__("sys").prefix)'
