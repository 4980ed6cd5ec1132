# shellcheck shell=bash
# Sourced by the GPU scripts (gpu-run.sh, gpu-compare.sh): where Criterion is
# not installed, a local copy of Criterion's Debian packages (see
# CONTRIBUTING.md) in .criterion-debs/ (or DS_CRITERION_DEBS) is unpacked
# under /tmp/crit, and pkg-config, the loader and the linker are pointed at it.
debs=${DS_CRITERION_DEBS:-.criterion-debs}
if [ -d "$debs" ]; then
  mkdir -p /tmp/crit
  for f in "$debs"/*.deb; do dpkg -x "$f" /tmp/crit; done
  pc=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig
  # Point the .pc at the unpacked tree; its Requires.private (libffi, libgit2,
  # nanomsg) have no .pc files there and are not needed for dynamic linking.
  sed -i -e "s|^prefix=.*|prefix=/tmp/crit/usr|" -e '/^Requires/d' "$pc/criterion.pc"
  export PKG_CONFIG_PATH="$pc:${PKG_CONFIG_PATH:-}"
  export LD_LIBRARY_PATH="/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export LDFLAGS="-Wl,-rpath-link,/tmp/crit/usr/lib/x86_64-linux-gnu"
fi
