#!/usr/bin/env bash
# Set up (system packages + .venv), check the docs and run the whole test suite, slow tests
# included.
# Extra arguments go to pytest, e.g. scripts/test.sh -k mount -x
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# the test extras (Ray, moto, s3fs, the benchmarks' peer loaders...), on top of what setup.sh
# installed; stamped like setup.sh's install, by pyproject.toml's hash
stamp=.venv/.sandfs-test-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    .venv/bin/pip install -q --disable-pip-version-check -e ".[test]"
    echo "$want" > "$stamp"
fi
export SANDFS_REQUIRE_FUSE=${SANDFS_REQUIRE_FUSE:-1}   # no silent skips of the mount tests
.venv/bin/ruff check .
# the docs: README budget, links and anchors, no section numbers cited in code, the quickstart runs
.venv/bin/python scripts/check_docs.py --run-quickstart
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
