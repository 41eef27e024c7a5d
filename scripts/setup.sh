#!/usr/bin/env bash
# Installs what sandfs and its demo need on a fresh Debian machine: system packages, and a venv
# in .venv with torch and the package (scripts/test.sh adds the test extras).
# Idempotent: a second run only checks. Usage: [TORCH_INDEX_URL=URL] scripts/setup.sh
# sandfs's daemon needs no torch; the demo, tests, benchmarks and sandfs.torch do. Where the
# default index resolves torch to a CUDA build (PyPI on Linux x86_64), pass PyTorch's CPU index:
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/setup.sh
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
# The stamp holds a hash of pyproject.toml, not a time: a fresh checkout or worktree has a newer
# pyproject.toml without any change in what it asks for.
stamp=.venv/.sandfs-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # torch first, pinned, so the package install finds the pin satisfied and keeps this build.
    torch_index=()
    [ -n "${TORCH_INDEX_URL:-}" ] && torch_index=(--index-url "$TORCH_INDEX_URL")
    .venv/bin/pip install -q --disable-pip-version-check "${torch_index[@]}" torch==2.13.0
    # the distribution was called "sandfs" before (PyPI's "sandfs" is another project): a venv
    # made then holds it, and its editable finder would shadow this one
    .venv/bin/pip uninstall -y -q --disable-pip-version-check sandfs 2>/dev/null || true
    .venv/bin/pip install -q --disable-pip-version-check -e .
    echo "$want" > "$stamp"
fi
# pyfuse3 rebuilt so that its replies release the GIL (third_party/pyfuse3/README.md). Where it
# cannot be built, the stock pyfuse3 installed above serves the same bytes (the reason is kept
# for the test that checks which one is installed).
rm -f .venv/.pyfuse3-build-failed
if ! third_party/pyfuse3/install.sh .venv 2>.venv/.pyfuse3-build.log; then
    tail -n 5 .venv/.pyfuse3-build.log > .venv/.pyfuse3-build-failed
    echo "setup: warning: the patched pyfuse3 could not be built, the stock one stays:" >&2
    cat .venv/.pyfuse3-build-failed >&2
fi
# A CUDA build on a machine without an NVIDIA GPU is several GB that can never be used.
torch_cuda=$(.venv/bin/python -c 'import torch; print(torch.version.cuda)' 2>/dev/null || echo None)
if [ "$torch_cuda" != "None" ] && [ ! -e /dev/nvidia0 ] && ! command -v nvidia-smi >/dev/null; then
    echo "setup: hint: torch is a CUDA $torch_cuda build and this machine has no GPU; for the CPU build: rm -rf .venv && TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/setup.sh" >&2
fi
echo "setup: ready (.venv)" >&2
