#!/usr/bin/env bash
# Set up (system packages + .venv), check the docs and run the whole test suite, slow tests
# included.
# Extra arguments go to pytest, e.g. scripts/test.sh -k mount -x
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export SANDFS_REQUIRE_FUSE=${SANDFS_REQUIRE_FUSE:-1}   # no silent skips of the mount tests
.venv/bin/ruff check .
# the docs: README budget, links and anchors, no section numbers cited in code, the quickstart runs
.venv/bin/python scripts/check_docs.py --run-quickstart
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
