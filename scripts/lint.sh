#!/usr/bin/env bash
# Lint, format check and type check with the .venv's tools (`make lint`; a step of `make test`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=.venv/bin
"$BIN/ruff" check .
"$BIN/ruff" format --check .
"$BIN/mypy"
