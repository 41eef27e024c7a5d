#!/usr/bin/env bash
# The sandfs demo on a fresh machine: set up, make a small dataset, mount it, train a tiny
# PyTorch model for two epochs by reading views, print the status, unmount.
# The mount and its cache go to $SANDFS_DEMO_DIR/{mnt,cache} (kept afterwards), or to a fresh
# folder from mktemp (removed afterwards): two users or two runs never share one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PY=.venv/bin/python
SANDFS=.venv/bin/sandfs
if [ -n "${SANDFS_DEMO_DIR:-}" ]; then
    DEMO_DIR=$SANDFS_DEMO_DIR
    OWN_DIR=""
else
    DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sandfs-demo.XXXXXX")
    OWN_DIR=$DEMO_DIR
fi
MNT=$DEMO_DIR/mnt
CACHE=$DEMO_DIR/cache

mounted() { findmnt -rn --mountpoint "$MNT" >/dev/null 2>&1; }
finish() {
    if mounted; then
        $SANDFS unmount "$MNT" || fusermount3 -uz "$MNT"
    fi
    # a folder this run made goes too, never one that is still mounted
    if [ -n "$OWN_DIR" ] && ! mounted; then
        rm -rf "$OWN_DIR"
    fi
}

if [ ! -d demo-data/videos ]; then
    $PY scripts/make_dataset.py demo-data/videos --classes 4 --videos-per-class 8
fi
$SANDFS unmount "$MNT" >/dev/null 2>&1 || true
trap finish EXIT
$SANDFS mount "$MNT" --config configs/demo.yaml --cache-dir "$CACHE"

echo "--- the tree"
ls "$MNT" "$MNT/demo" | head -20
echo "--- one view's metadata (getfattr)"
$PY -c "import os, json, sys; m = json.loads(os.getxattr(sys.argv[1], 'user.sand.meta')); \
print(json.dumps({k: m[k] for k in ('task', 'epoch', 'iteration', 'shape', 'dtype')}), \
'first clip:', json.dumps(m['samples'][0]))" "$MNT/demo/0/0/view"
echo "--- training"
$PY scripts/train_demo.py "$MNT" demo --epochs 2
echo "--- status"
$SANDFS status "$MNT"
