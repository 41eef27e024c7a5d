#!/usr/bin/env bash
# Builds pyfuse3 3.5.0 from its sdist with reply-nogil.patch and installs it into a venv
# (README.md says what and why). Idempotent: a stamp in the venv holds the patch's hash, and
# the installed module must still say it is patched. Usage: install.sh VENV
# Exits non-zero where it cannot build (no compiler, no Python headers, no registry): the venv
# then keeps the stock pyfuse3 that sandfs's install put there, and sandfs works with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$1
VERSION=3.5.0
SDIST_SHA256=88399a9494b88603230bba300f4ba9ad63fece5ed514ca3633d555a0c6a42b24
PATCH_ID=reply-nogil-1   # what the patched module's SANDFS_PATCH says

stamp="$venv/.pyfuse3-patched"
want=$(cat "$here/reply-nogil.patch" "$here/build-constraints.txt" | sha256sum | cut -d' ' -f1)
installed=$("$venv/bin/python" -c 'import pyfuse3; print(getattr(pyfuse3, "SANDFS_PATCH", ""))' \
    2>/dev/null || true)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ "$installed" = "$PATCH_ID" ]; then
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip=("$venv/bin/pip" --disable-pip-version-check -q)
"${pip[@]}" download --no-deps --no-binary :all: -d "$work" "pyfuse3==$VERSION"
sdist="$work/pyfuse3-$VERSION.tar.gz"
echo "$SDIST_SHA256  $sdist" | sha256sum -c --quiet
tar xzf "$sdist" -C "$work"
src="$work/pyfuse3-$VERSION"
# a repository of its own, so that git applies the patch there whatever encloses $work;
# removed before the build, whose setuptools-scm would read its version from it
git -C "$src" init -q && git -C "$src" apply "$here/reply-nogil.patch" && rm -rf "$src/.git"
# the local version names the build in `pip list`; it still satisfies sandfs's ==3.5.0
PIP_CONSTRAINT="$here/build-constraints.txt" \
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYFUSE3="$VERSION+sandfs.${PATCH_ID//-/.}" \
    "${pip[@]}" wheel --no-deps -w "$work/wheel" "$src"
"${pip[@]}" install --no-deps --force-reinstall "$work"/wheel/pyfuse3-*.whl
"$venv/bin/python" -c "import pyfuse3, sys; sys.exit(pyfuse3.SANDFS_PATCH != '$PATCH_ID')"
echo "$want" > "$stamp"
echo "pyfuse3: built $VERSION with $PATCH_ID" >&2
