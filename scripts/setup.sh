#!/usr/bin/env bash
# Installs everything sandfs needs on a fresh Debian machine: system packages and a venv in .venv.
# Idempotent: a second run only checks. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for bin in fusermount3:fuse3 ffmpeg:ffmpeg pkg-config:pkg-config; do
    command -v "${bin%%:*}" >/dev/null || need_apt+=("${bin##*:}")
done
pkg-config --exists fuse3 2>/dev/null || need_apt+=(libfuse3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]} with apt-get" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq fuse3 libfuse3-dev pkg-config ffmpeg >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.sandfs-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    # torch first, pinned: a plain "torch" would pull a multi-GB CUDA build.
    .venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
    .venv/bin/pip install -q --disable-pip-version-check -e ".[test]"
    touch "$stamp"
fi
echo "setup: ready (.venv)" >&2
