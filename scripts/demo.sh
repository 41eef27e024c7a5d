#!/usr/bin/env bash
# The sandfs demo on a fresh machine: set up, make a small dataset, mount it, train a tiny
# PyTorch model for two epochs by reading views, print the status, unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PY=.venv/bin/python
SANDFS=.venv/bin/sandfs
MNT=/tmp/sandfs-demo/mnt          # = engine.mountpoint in configs/demo.yaml

if [ ! -d demo-data/videos ]; then
    $PY scripts/make_dataset.py demo-data/videos --classes 4 --videos-per-class 8
fi
$SANDFS unmount "$MNT" >/dev/null 2>&1 || true
$SANDFS mount --config configs/demo.yaml
trap '$SANDFS unmount "$MNT" || fusermount3 -uz "$MNT"' EXIT

echo "--- the tree"
ls "$MNT" "$MNT/demo" | head -20
echo "--- one view's metadata (getfattr)"
$PY -c "import os, json; m = json.loads(os.getxattr('$MNT/demo/0/0/view', 'user.sand.meta')); \
print(json.dumps({k: m[k] for k in ('task', 'epoch', 'iteration', 'shape', 'dtype')}), \
'first clip:', json.dumps(m['samples'][0]))"
echo "--- training"
$PY scripts/train_demo.py "$MNT" demo --epochs 2
echo "--- status"
$SANDFS status "$MNT"
