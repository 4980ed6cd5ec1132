#!/bin/sh
# Builds the least_loaded policy demo against an installed libdetshare, found
# by pkg-config under the name `detshare`:
#
#   examples/policies/build.sh OUTDIR      writes OUTDIR/policy_demo
#
# Environment: CC (default cc), CFLAGS (added after the warning flags),
# PKG_CONFIG (default pkg-config) and PKG_CONFIG_PATH as pkg-config reads it:
# the folder of detshare.pc for an install outside the default search path,
# or a meson build folder's meson-uninstalled/ to build against that build
# (detshare-uninstalled.pc; run the demo with LD_LIBRARY_PATH set to the
# library's folder in either case). Fails if pkg-config does not know
# detshare or the compiler warns.
set -eu

[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out"

pkg=${PKG_CONFIG:-pkg-config}
flags=$($pkg --cflags --libs detshare) || {
  echo "$0: $pkg knows no detshare (PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-})" >&2; exit 1; }

# The flags stay unquoted on purpose: pkg-config's output is a word list.
set -x
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -O2 ${CFLAGS:-} \
  "$here/main.c" "$here/least_loaded.c" $flags -o "$out/policy_demo"
