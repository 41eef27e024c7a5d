#!/usr/bin/env bash
# Set up (system packages + .venv) and run the whole test suite, slow tests included.
# Extra arguments go to pytest, e.g. scripts/test.sh -k mount -x
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export SANDFS_REQUIRE_FUSE=${SANDFS_REQUIRE_FUSE:-1}   # no silent skips of the mount tests
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
