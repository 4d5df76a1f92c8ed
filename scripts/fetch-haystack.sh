#!/usr/bin/env bash
# fetch-haystack.sh — gathers the real-prose haystack for `locks eval --tasks` and prints
# the path of the text file. Nothing is downloaded except Debian packages:
#   - debian-faq: the Debian FAQ as plain text (~180 KB of English prose), installed with
#     apt-get when missing (root only; otherwise the script goes on without it);
#   - /usr/share/common-licenses: the licence texts every Debian system carries (GPL-3,
#     GPL-2, LGPL-2.1, GFDL-1.3, Apache-2.0, MPL-2.0, Artistic, CC0-1.0).
# The text is written once, outside the repository, to
#   ${LOCKS_HAYSTACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locks/haystack}/prose.txt
# A second call is a no-op. --gnuplot also installs gnuplot (for `make eval`) if missing.
set -euo pipefail

dir="${LOCKS_HAYSTACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locks/haystack}"
out="$dir/prose.txt"
want_gnuplot=0
for a in "$@"; do
    case "$a" in
    --gnuplot) want_gnuplot=1 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "fetch-haystack.sh: unknown option $a" >&2; exit 2 ;;
    esac
done

apt_install() { # package...
    if [ "$(id -u)" != 0 ]; then
        echo "fetch-haystack.sh: not root, cannot apt-get install $*" >&2
        return 1
    fi
    # Update the lists only when the package is unknown to apt-cache.
    if ! apt-cache show "$1" >/dev/null 2>&1; then apt-get update -qq >&2 || true; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

if [ "$want_gnuplot" = 1 ] && ! command -v gnuplot >/dev/null 2>&1; then
    apt_install gnuplot-nox || { echo "fetch-haystack.sh: gnuplot unavailable" >&2; exit 1; }
fi

if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi

faq=/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz
if [ ! -f "$faq" ]; then apt_install debian-faq || true; fi

mkdir -p "$dir"
tmp="$(mktemp "$dir/prose.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
if [ -f "$faq" ]; then
    # From the first section on (skips the title page and table of contents), without
    # the numbered headings and the rules of dashes.
    zcat "$faq" | awk '/^1[.]1[.]/{f=1} f' |
        grep -v -E '^ *([0-9]+[.])+|^ *[-=*]{3,} *$' >>"$tmp"
fi
for l in GPL-3 GPL-2 LGPL-2.1 GFDL-1.3 Apache-2.0 MPL-2.0 Artistic CC0-1.0; do
    f="/usr/share/common-licenses/$l"
    if [ -f "$f" ]; then cat "$f" >>"$tmp"; printf '\n\n' >>"$tmp"; fi
done
if [ ! -s "$tmp" ]; then
    echo "fetch-haystack.sh: no prose found (no debian-faq, no common-licenses)" >&2
    exit 1
fi
mv "$tmp" "$out"
trap - EXIT
echo "fetch-haystack: $(wc -c <"$out") bytes of prose" >&2
echo "$out"
