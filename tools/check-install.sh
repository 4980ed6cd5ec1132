#!/usr/bin/env bash
# Checks libdetshare as it is installed, the way a user meets it:
#
#   tools/check-install.sh [BUILD_DIR]        (default: build, configured and built)
#
# 1. install    `meson install --destdir` of BUILD_DIR into a temporary folder:
#               the library, headers, pkg-config file, dsinfo and the Python
#               package, where `meson introspect --installed` says they go
#               (the prefix BUILD_DIR was configured with, /usr/local by
#               default, under the temporary folder); the installed dsinfo runs
# 2. C          examples/quickstart/quickstart.c, copied out of the tree, built
#               with `pkg-config --cflags --libs detshare` from the installed
#               detshare.pc (its prefix moved to the temporary folder) and run
#               with LD_LIBRARY_PATH set to the installed lib folder
# 3. policy     examples/policies (a policy plug-in and its demo), copied out
#               of the tree, built by its build.sh with pkg-config as in 2
#               (PKG_CONFIG: pkg-config with the prefix moved) and run: the
#               demo checks the policy's placements and fails otherwise
# 4. Python     examples/quickstart/quickstart.py run from outside the tree with
#               PYTHONPATH set to the installed site folder: detshare must come
#               from there, and libdetshare.so.0 from LD_LIBRARY_PATH
# 5. venv       `python3 -m venv --system-site-packages` plus
#               `pip install --no-index --no-build-isolation bindings/python`
#               (offline; needs Debian's python3-venv and python3-wheel), then
#               quickstart.py with DETSHARE_LIBRARY set to the installed library
# 6. README     every fenced block right after a line
#               `<!-- snippet: PATH -->` in README.md is byte for byte the file
#               PATH (a diff otherwise); README.md must have such markers
# 7. quick start the shell block after `<!-- run: quick start -->` in README.md,
#               run as written in a copy of the tree with a fresh HOME
#
# Python: $PYTHON if set, else the interpreter meson runs under (the `#!` line
# of `meson`, /usr/bin/python3 on Debian 12), since meson installs the package
# for that one. One line per check; stops at the first failure and shows its
# log. Temporary folders are removed on exit.
set -Eeuo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
[ -f "$build/build.ninja" ] || { echo "check-install: $build is not a configured meson build folder" >&2; exit 2; }
build=$(cd "$build" && pwd)

if [ -z "${PYTHON:-}" ]; then
  shebang=
  if meson_exe=$(command -v meson); then shebang=$(sed -n '1s/^#! *//p' "$meson_exe"); fi
  case "$shebang" in
    */env\ *) PYTHON=$(command -v "${shebang##* }" || true) ;;
    /*python*) PYTHON=${shebang%% *} ;;
  esac
  [ -x "${PYTHON:-}" ] || PYTHON=/usr/bin/python3
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/detshare-check-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
check=setup
# On any failing command: name the check, show what it printed, stop.
on_error() { echo "FAIL $check"; sed 's/^/    /' "$log" | tail -n 60; exit "$1"; }
trap 'on_error $?' ERR
begin() { check=$1; : >"$log"; }   # a check's log holds only its own output
quiet() { "$@" >>"$log" 2>&1; }
shown() { "$@" >"$tmp/out" 2>&1 || { cat "$tmp/out" >>"$log"; return 1; }; sed 's/^/      /' "$tmp/out"; }

echo "check-install: build $build, python $PYTHON ($("$PYTHON" -c 'import platform; print(platform.python_version())'))"

# --- 1. install ---------------------------------------------------------------
begin install
stage=$tmp/stage
quiet meson install -C "$build" --destdir "$stage" --quiet
# The prefix, and where each file went (paths without the staging folder).
where=$("$PYTHON" - "$build" 2>>"$log" <<'PY'
import json, subprocess, sys
build = sys.argv[1]
def intro(what):
    return json.loads(subprocess.run(["meson", "introspect", what, build], check=True,
                                     capture_output=True, text=True).stdout)
dests = list(intro("--installed").values())
def one(suffix):
    hits = sorted(d for d in dests if d.endswith(suffix))
    if not hits:
        sys.exit(f"meson installs no .../{suffix.lstrip('/')}")
    return hits[0]
prefix = [o["value"] for o in intro("--buildoptions") if o["name"] == "prefix"][0]
for path in (prefix, one("/libdetshare.so.0"), one("/pkgconfig/detshare.pc"), one("/detshare/detshare.h"),
             one("/bin/dsinfo"), one("/detshare/__init__.py")):
    print(path)
PY
)
{ read -r prefix; read -r libso; read -r pcfile; read -r header; read -r dsinfo; read -r pyinit; } <<<"$where"
libdir=$stage$(dirname "$libso")
pcdir=$stage$(dirname "$pcfile")
site=$stage$(dirname "$(dirname "$pyinit")")
for f in "$stage$libso" "$stage$pcfile" "$stage$header" "$stage$dsinfo" "$stage$pyinit"; do
  [ -e "$f" ] || { echo "missing after meson install: $f" >>"$log"; false; }
done
quiet env LD_LIBRARY_PATH="$libdir" "$stage$dsinfo" --sim --no-probe
rel() { echo "${1#"$stage$prefix"/}"; }
echo "ok   install: prefix $prefix (staged in $stage): $(rel "$libdir")/libdetshare.so.0, $(rel "$pcdir")/detshare.pc," \
     "$(rel "$(dirname "$stage$header")")/*.h, $(rel "$stage$dsinfo"), $(rel "$site")/detshare"

# --- 2. C quick start, out of tree, through pkg-config --------------------------
begin "C quick start"
mkdir "$tmp/c"
cp "$root/examples/quickstart/quickstart.c" "$tmp/c/"
cd "$tmp/c"
# The installed detshare.pc names the real prefix: move it to the staging folder.
pc() { PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$stage$prefix" "$@" detshare; }
pc_libdir=$(pc --variable=libdir 2>>"$log")
[ "$pc_libdir" = "$libdir" ] || { echo "pkg-config's libdir $pc_libdir is not $libdir" >>"$log"; false; }
read -r -a flags <<<"$(pc --cflags --libs 2>>"$log")"
echo "${CC:-cc} quickstart.c ${flags[*]} -o quickstart" >>"$log"
quiet "${CC:-cc}" quickstart.c "${flags[@]}" -o quickstart
linked=$(LD_LIBRARY_PATH="$libdir" ldd ./quickstart | awk '/libdetshare/ {print $3}')
[ "$linked" = "$libdir/libdetshare.so.0" ] || { echo "quickstart loads libdetshare from '$linked'" >>"$log"; false; }
echo "ok   C quick start: built out of tree with pkg-config (${flags[*]}), runs:"
shown env LD_LIBRARY_PATH="$libdir" ./quickstart

# --- 3. a policy plug-in, out of tree, through build.sh and pkg-config ----------
begin "policy plug-in"
cp -r "$root/examples/policies" "$tmp/policy"
# build.sh runs $PKG_CONFIG: here pkg-config with the installed detshare.pc's
# prefix moved to the staging folder, as pc() above.
printf '#!/bin/sh\nexec pkg-config --define-variable=prefix=%s "$@"\n' "$stage$prefix" >"$tmp/pkg-config"
chmod +x "$tmp/pkg-config"
cd "$tmp/policy"
quiet env PKG_CONFIG="$tmp/pkg-config" PKG_CONFIG_PATH="$pcdir" ./build.sh "$tmp/policy/out"
linked=$(LD_LIBRARY_PATH="$libdir" ldd out/policy_demo | awk '/libdetshare/ {print $3}')
[ "$linked" = "$libdir/libdetshare.so.0" ] || { echo "policy_demo loads libdetshare from '$linked'" >>"$log"; false; }
echo "ok   policy plug-in: examples/policies built out of tree by its build.sh with pkg-config, runs:"
shown env LD_LIBRARY_PATH="$libdir" out/policy_demo

# --- 4. the installed Python package --------------------------------------------
begin "Python package"
mkdir "$tmp/py" "$tmp/no-pc"
cp "$root/examples/quickstart/quickstart.py" "$tmp/py/"
cd "$tmp/py"
# The library through LD_LIBRARY_PATH alone: no DETSHARE_LIBRARY, no pkg-config.
py_env=(env -u DETSHARE_LIBRARY -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$tmp/no-pc" PYTHONPATH="$site"
        LD_LIBRARY_PATH="$libdir" PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1)
where=$("${py_env[@]}" "$PYTHON" -c '
import sys, detshare
print(detshare.__file__, detshare.library_path())
for p in (detshare.__file__, str(detshare.library_path())):
    if not p.startswith(sys.argv[1] + "/"):
        sys.exit(f"{p} is not under {sys.argv[1]}")
' "$stage" 2>>"$log")
echo "ok   Python package: detshare from $(rel "${where%% *}"), library $(rel "${where##* }"), quickstart.py runs:"
shown "${py_env[@]}" "$PYTHON" quickstart.py

# --- 5. pip install into a venv, offline ------------------------------------------
begin "venv pip install"
"$PYTHON" -c 'import wheel' 2>/dev/null ||
  { echo "$PYTHON has no 'wheel' module: install Debian's python3-wheel (pip needs it to build the package offline)" >>"$log"; false; }
quiet "$PYTHON" -m venv --system-site-packages "$tmp/venv"
# A copy, so that the build leaves nothing (build/, *.egg-info) in the tree.
mkdir "$tmp/src"
cp -r "$root/bindings/python" "$tmp/src/python"
rm -rf "$tmp/src/python/build" "$tmp/src/python/"*.egg-info
quiet "$tmp/venv/bin/pip" install --no-index --no-build-isolation "$tmp/src/python"
rm -rf "$tmp/src"
venv_env=(env -u LD_LIBRARY_PATH -u PYTHONPATH DETSHARE_LIBRARY="$libdir/libdetshare.so.0" PYTHONNOUSERSITE=1
          PYTHONDONTWRITEBYTECODE=1)
where=$("${venv_env[@]}" "$tmp/venv/bin/python" -c '
import sys, detshare
print(detshare.__file__)
if not detshare.__file__.startswith(sys.argv[1] + "/"):
    sys.exit(f"{detshare.__file__} is not in the venv {sys.argv[1]}")
' "$tmp/venv" 2>>"$log")
echo "ok   venv pip install: detshare in ${where#"$tmp"/}, DETSHARE_LIBRARY=$(rel "$libdir")/libdetshare.so.0, quickstart.py runs:"
shown "${venv_env[@]}" "$tmp/venv/bin/python" quickstart.py

# --- 6. README.md's snippets are the files ----------------------------------------
begin "README snippets"
cd "$root"
readme=$("$PYTHON" - README.md 2>>"$log" <<'PY'
import difflib, re, sys
from pathlib import Path
readme = Path(sys.argv[1])
lines = readme.read_text().splitlines(keepends=True)
marker = re.compile(r"^<!--\s*snippet:\s*(\S+)\s*-->\s*$")
checked, bad = [], 0
for i, line in enumerate(lines):
    m = marker.match(line)
    if not m:
        continue
    path = m.group(1)
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j == len(lines) or not lines[j].startswith("```"):
        print(f"{readme}:{i + 1}: no fenced block right after the snippet marker for {path}", file=sys.stderr)
        bad += 1
        continue
    fence = re.match(r"^(`{3,})", lines[j]).group(1)
    k = j + 1
    while k < len(lines) and not lines[k].startswith(fence):
        k += 1
    block = "".join(lines[j + 1:k])
    src = Path(path)
    if not src.is_file():
        print(f"{readme}:{i + 1}: snippet names {path}, which does not exist", file=sys.stderr)
        bad += 1
        continue
    text = src.read_text()
    if block != text:
        sys.stderr.writelines(difflib.unified_diff(text.splitlines(keepends=True), block.splitlines(keepends=True),
                                                   f"{path}", f"{readme}:{j + 2} (block after the marker)"))
        bad += 1
    checked.append(path)
if bad:
    sys.exit(1)
print(", ".join(checked))
PY
)
[ -n "$readme" ] || { echo "README.md has no '<!-- snippet: PATH -->' markers" >>"$log"; false; }
echo "ok   README snippets: the blocks after the markers are $readme"

# --- 7. README.md's quick-start commands run as written ----------------------------
# The fenced block after `<!-- run: quick start -->`, run with bash -e in a copy
# of the tree (tracked and new files; tracked ones deleted and not yet
# committed are left out) with HOME in the temporary folder, so its
# `meson install` into $HOME/.local is a user's first install on a clean
# account. Both quick-start programs must print their two lines.
begin "README quick start"
cd "$root"
"$PYTHON" - README.md >"$tmp/quickstart.sh" 2>>"$log" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
for i, line in enumerate(lines):
    if re.match(r"^<!--\s*run:\s*quick start\s*-->\s*$", line):
        j = i + 1
        assert lines[j].startswith("```sh"), f"README.md:{j + 1}: no ```sh block after the run marker"
        k = j + 1
        while not lines[k].startswith("```"):
            k += 1
        sys.stdout.write("".join(lines[j + 1:k]))
        break
else:
    sys.exit("README.md has no '<!-- run: quick start -->' marker")
PY
mkdir -p "$tmp/qs/home" "$tmp/qs/tree"
git ls-files -co --exclude-standard -z |
  while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -cf - | tar -xf - -C "$tmp/qs/tree"
(cd "$tmp/qs/tree" && find . -path ./build-local -prune -o -print | sort) >"$tmp/qs/before"
(cd "$tmp/qs/tree" && env -u PYTHONPATH -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH HOME="$tmp/qs/home" \
   bash -euo pipefail "$tmp/quickstart.sh") >"$tmp/qs/out" 2>>"$log" || { cat "$tmp/qs/out" >>"$log"; false; }
# what the quick start builds stays under build-local/ (it once left a
# `quickstart` binary in the source tree)
(cd "$tmp/qs/tree" && find . -path ./build-local -prune -o -print | sort) >"$tmp/qs/after"
if ! cmp -s "$tmp/qs/before" "$tmp/qs/after"; then
  { echo "the quick start wrote into the source tree, outside build-local/:"
    comm -13 "$tmp/qs/before" "$tmp/qs/after"; } >>"$log"
  false
fi
n=$(grep -cE '^(inference|training) +4 kernels done' "$tmp/qs/out" || true)
[ "$n" = 4 ] || { cat "$tmp/qs/out" >>"$log"; echo "expected 4 quick-start lines, got $n" >>"$log"; false; }
echo "ok   README quick start: ran as written on a fresh HOME; both programs printed:"
grep -E '^(inference|training) ' "$tmp/qs/out" | sed 's/^/      /'
