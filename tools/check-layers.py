#!/usr/bin/env python3
"""Checks the layering of src/: which module may include and call which.

    check-layers.py ROOT [ARCHIVE]   check the tree at ROOT; with ARCHIVE (the
                                     built libdetshare_internal.a) also check
                                     which module's symbols each member uses
    check-layers.py --self-test      run the checks on small made-up trees

Floors (an arrow points down or sideways, never up):

  1   seam      src/seam/ (driver, log, params, alloc)
  2   memory    src/memory/ (the allocation registry, the copy queue: the
                mechanism's parts that know no vCtx and no runtime)
  2.5 core      src/core/ (the rest of the mechanism, over memory/)
  3   policy    src/policy/;  rck  src/rck/;  sim  src/sim/
  4 assembly  src/*.{c,h} (plugs floor 3 into core);  api  include/detshare/
    (the public headers, which every floor may include)

Rules, over the `#include` lines of src/**/*.{c,h} and include/**/*.h (a
quoted include resolves against the including file's folder, then include/,
then src/; an angle include against include/, then src/; what resolves
nowhere is a system or toolkit header):

  a  a core or memory file includes nothing of policy/, rck/, sim/ or the
     assembly (src/*.h);
  b  a policy file includes nothing under src/ but policy/ itself: public
     headers (<detshare/...>), system headers and the headers of policy/,
     which are held to the same rule, so that each policy could be built
     outside the library with its folder (slo_aware.c and its sizing rule,
     sizing.h, which the Python tools also load on its own);
  c  a seam file includes only seam files and public headers;
  up no other include points to a higher floor (memory -> core,
     rck -> assembly, ...);
  p  a public header includes only public and system headers;
  u  every file of src/ lies on a floor (a new folder needs a line in
     MODULE_DIRS below);
  d  the module graph of the includes has no cycle (the edges are printed;
     an upward edge, reported above, is left out of this check).

With ARCHIVE, over `nm -A` of its members (meson names the object of
src/core/vctx.c `core_vctx.c.o`; members are matched to the tree's sources):

  e  an undefined symbol of a seam, memory or core member that another
     member defines is defined by a member of its floor or one below (a
     seam member's by a seam member, a memory member's by a seam or memory
     member): core reaches policies, the RCK and the simulator only through
     tables, never by name;
  ep a policy member references only the public API (ds_ names, not ds__)
     and what no member defines (libc);
  eu no member references a symbol defined on a higher floor (rck or sim ->
     assembly), and every member is matched to a source file.

Prints each violation as `file:line: [rule] ...` or `file (member): [rule]
symbol ...`, grouped by rule, and exits 1; exits 0 when there is none.
Registered as the meson tests `layers` and `layers_selftest`. Set NM, CC and
AR to use other tools. Standard library only.
"""
import concurrent.futures
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# src/<dir>/ -> module
MODULE_DIRS = {"seam": "seam", "memory": "memory", "core": "core", "policy": "policy", "rck": "rck", "sim": "sim"}
# memory/ is floor 2's lower storey: core includes and calls it, never the reverse
FLOOR = {"seam": 1, "memory": 2, "core": 2.5, "policy": 3, "rck": 3, "sim": 3, "assembly": 4, "api": 4}
LOW = ("seam", "memory", "core")
HIGH = ("policy", "rck", "sim", "assembly")
# Generated members of the archive (meson-generated_..): name fragment -> module.
GENERATED = {"ds_device_kernels_fatbin": "rck"}  # the RCK's device code (rck/device_kernels.cu)

RULES = {
    "a": "core/memory includes policy, rck, sim or assembly",
    "b": "policy includes a file of src/ outside policy/",
    "c": "seam includes a file above the seam",
    "up": "include points to a higher floor",
    "p": "public header includes a file of src/",
    "u": "file or member on no floor",
    "d": "cycle in the module graph",
    "e": "seam/memory/core member uses a symbol of a higher floor",
    "ep": "policy member uses a symbol outside the public API",
    "eu": "member uses a symbol of a higher floor",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def module_of(rel):
    """Module of a root-relative path, 'unplaced' for a file of src/ on no floor,
    None outside src/ and include/."""
    if rel.startswith("include/"):
        return "api"
    parts = rel.split("/")
    if parts[0] != "src" or len(parts) < 2:
        return None
    if len(parts) == 2:
        return "assembly"
    return MODULE_DIRS.get(parts[1], "unplaced")


def source_files(root):
    files = []
    for top, exts in (("src", (".c", ".h")), ("include", (".h",))):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(exts):
                    files.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return files


def resolve(root, rel, quote, target):
    bases = ([os.path.dirname(rel)] if quote == '"' else []) + ["include", "src"]
    for base in bases:
        p = os.path.normpath(os.path.join(base, target)).replace(os.sep, "/")
        if not p.startswith("../") and os.path.isfile(os.path.join(root, p)):
            return p
    return None


def includes(root, rel):
    """(line, written, resolved path) of each #include of a file that names a
    file of the tree; `#if 0` blocks and comments are skipped."""
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    out, dead = [], []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if re.match(r"#\s*if(def|ndef)?\b", s):
            dead.append(bool(re.match(r"#\s*if\s+0\b", s)))
            continue
        if re.match(r"#\s*endif\b", s):
            if dead:
                dead.pop()
            continue
        if any(dead):
            continue
        m = INCLUDE.match(line)
        if m:
            path = resolve(root, rel, m.group(1), m.group(2))
            if path:
                out.append((n, m.group(1) + m.group(2) + (">" if m.group(1) == "<" else '"'), path))
    return out


def include_check(root):
    """(violations, {(from, to): [example, count]}) of the include rules."""
    viol, edges = [], {}
    for rel in source_files(root):
        src = module_of(rel)
        if src == "unplaced":
            viol.append(("u", "%s: [u] on no floor: add src/%s/ to MODULE_DIRS in "
                         "tools/check-layers.py, or move the file" % (rel, rel.split("/")[1])))
        for n, written, path in includes(root, rel):
            dst = module_of(path)
            where = "%s:%d: " % (rel, n)
            what = "includes %s (%s, %s)" % (written, path, dst)
            if src != dst and src != "api" and dst != "api":
                e = edges.setdefault((src, dst), ["%s:%d" % (rel, n), 0])
                e[1] += 1
            if src == "api":
                if dst != "api":
                    viol.append(("p", where + "[p] public header " + what))
            elif src == "policy":
                if dst not in ("api", "policy"):
                    viol.append(("b", where + "[b] policy " + what + ": use public headers only"))
            elif src == "seam":
                if dst not in ("seam", "api"):
                    viol.append(("c", where + "[c] seam file " + what))
            elif src in ("core", "memory") and dst in HIGH:
                viol.append(("a", where + "[a] %s file %s" % (src, what)))
            elif dst != "api" and upward(src, dst):
                viol.append(("up", where + "[up] %s file %s" % (src, what)))
    return viol, edges


def cycles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    succ = {v: sorted(w for (u, w) in edges if u == v) for v in nodes}

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def upward(u, w):
    return u in FLOOR and w in FLOOR and FLOOR[w] > FLOOR[u]


def cycle_check(edges, kind):
    """Cycles of the graph without its upward edges (rules a, c and up report
    those, and each closes a cycle with the downward edges)."""
    viol = []
    edges = {e: v for e, v in edges.items() if not upward(*e)}
    nodes = {u for e in edges for u in e}
    for comp in cycles(nodes, edges):
        inner = ["%s -> %s (%s)" % (u, w, edges[(u, w)][0]) for (u, w) in sorted(edges)
                 if u in comp and w in comp]
        viol.append(("d", "[d] cycle among %s through %s: %s" % (", ".join(comp), kind, "; ".join(inner))))
    return viol


# --- symbols -----------------------------------------------------------------

def member_modules(root):
    """{archive member name: (module, source path)} for the tree's sources, as
    meson names their objects (relative to src/ or to the root, '/' -> '_')."""
    names, base = {}, {}
    for rel in source_files(root):
        if not rel.startswith("src/") or not rel.endswith(".c"):
            continue
        mod = module_of(rel)
        names[rel[4:].replace("/", "_") + ".o"] = (mod, rel)
        names[rel.replace("/", "_") + ".o"] = (mod, rel)
        base.setdefault(os.path.basename(rel) + ".o", []).append((mod, rel))
    for b, l in base.items():
        if len(l) == 1:
            names.setdefault(b, l[0])
    return names


def archive_symbols(archive):
    """{member: (defined global symbols, undefined symbols)} from nm -A."""
    nm = os.environ.get("NM", "nm")
    out = subprocess.run([nm, "-A", archive], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         universal_newlines=True).stdout
    mem = {}
    pat = re.compile(r"^(.+):\s*([0-9a-fA-F]+)?\s+(\S)\s+(\S+)$")
    for line in out.splitlines():
        m = pat.match(line)
        if not m:
            continue
        member = os.path.basename(m.group(1).rsplit(":", 1)[-1])
        t, name = m.group(3), m.group(4)
        d, u = mem.setdefault(member, (set(), set()))
        if t in "Uwv":
            u.add(name)
        elif t.isupper():
            d.add(name)
    return mem


def symbol_check(root, archive):
    """(violations, symbol edges) of rules e, ep, eu."""
    viol, edges = [], {}
    mods = member_modules(root)
    mem = archive_symbols(archive)
    if not mem:
        return [("u", "%s: [u] no symbols read (not an archive?)" % archive)], edges
    where = {}
    for member in mem:
        if member in mods:
            where[member] = mods[member]
            continue
        gen = [m for frag, m in GENERATED.items() if frag in member]
        if gen:
            where[member] = (gen[0], "generated " + member)
        else:
            where[member] = ("unplaced", member)
            viol.append(("u", "%s: [u] archive member matches no source of src/ and no entry "
                         "of GENERATED in tools/check-layers.py" % member))
    definers = {}
    for member, (defs, _) in mem.items():
        for s in defs:
            definers.setdefault(s, []).append(member)

    def label(member):
        mod, src = where[member]
        return "%s (%s)" % (src, member) if not src.startswith("generated") else member

    for member in sorted(mem):
        mod = where[member][0]
        for s in sorted(mem[member][1]):
            by = [d for d in definers.get(s, []) if d != member]
            by_mods = sorted({where[d][0] for d in by})
            for bm in by_mods:
                if bm != mod:
                    e = edges.setdefault((mod, bm), ["%s:%s" % (member, s), 0])
                    e[1] += 1
            defined = ", ".join("%s [%s]" % (where[d][1], where[d][0]) for d in by)
            if mod in LOW:
                allowed = [m for m in LOW if FLOOR[m] <= FLOOR[mod]]
                bad = [m for m in by_mods if m not in allowed]
                if bad:
                    viol.append(("e", "%s: [e] %s member uses %s, defined by %s" % (
                        label(member), mod, s, defined)))
            elif mod == "policy":
                public = s.startswith("ds_") and not s.startswith("ds__")
                if s.startswith("ds__") or (by and not public):
                    viol.append(("ep", "%s: [ep] policy member uses %s%s: only the public "
                                 "API (ds_ names) and libc" % (
                                     label(member), s, ", defined by " + defined if by else "")))
            elif mod in FLOOR:
                bad = [m for m in by_mods if m in FLOOR and FLOOR[m] > FLOOR[mod]]
                if bad:
                    viol.append(("eu", "%s: [eu] %s member uses %s, defined by %s" % (
                        label(member), mod, s, defined)))
    return viol, edges


def print_edges(title, edges):
    print("check-layers: %s (from -> to: count, first example):" % title)
    for (u, w), (ex, n) in sorted(edges.items()):
        print("  %-8s -> %-8s %4d  %s%s" % (u, w, n, ex, "  (UP)" if upward(u, w) else ""))


def check(root, archive=None, quiet=False):
    viol, edges = include_check(root)
    viol += cycle_check(edges, "includes")
    if not quiet:
        print_edges("module graph of the includes", edges)
    if archive:
        sv, sedges = symbol_check(root, archive)
        viol += sv
        if not quiet:
            print_edges("module graph of the symbols", sedges)
    return viol


def report(viol):
    for rule in RULES:
        hits = [t for r, t in viol if r == rule]
        if hits:
            print("check-layers: rule %s (%s): %d" % (rule, RULES[rule], len(hits)))
            for t in hits:
                print("  " + t)


# --- self-test ---------------------------------------------------------------

CLEAN = {
    "include/detshare/api.h": "#pragma once\n#include <stddef.h>\nint ds_api_fn(void);\n",
    "src/seam/driver.h": '#pragma once\n#include "detshare/api.h"\nint ds__seam_fn(void);\n',
    "src/seam/driver.c": '#include "seam/driver.h"\n#include "seam/log.h"\n'
                         "int ds__seam_fn(void) { return ds__log_fn(); }\n",
    "src/seam/log.h": "#pragma once\n#include <detshare/api.h>\nint ds__log_fn(void);\n",
    "src/seam/log.c": '#include "log.h"\nint ds__log_fn(void) { return 0; }\n',
    "src/core/runtime.h": '#pragma once\n#include "seam/driver.h"\n#include "memory/mem.h"\n'
                          "int ds__core_fn(void);\nextern int (*ds__hook)(void);\n",
    "src/core/runtime.c": '#include "core/runtime.h"\n#include <string.h>\n'
                          '#if 0\n#include "sim/sim.h"\n#endif\n/* #include "sim/sim.h" */\n'
                          "int (*ds__hook)(void);\n"
                          "int ds__core_fn(void) { return ds__seam_fn() + ds__mem_fn() + (ds__hook ? ds__hook() : 0); }\n"
                          "int ds_api_fn(void) { return (int)strlen(\"x\"); }\n",
    "src/memory/mem.h": '#pragma once\n#include "seam/driver.h"\nint ds__mem_fn(void);\n',
    "src/memory/mem.c": '#include "memory/mem.h"\nint ds__mem_fn(void) { return ds__seam_fn(); }\n',
    "src/policy/pol.c": '#include <detshare/api.h>\n#include "detshare/api.h"\n#include <stdlib.h>\n'
                        "int ds__policy_hook(void);\n"
                        "int ds__policy_hook(void) { return ds_api_fn() + abs(-1); }\n",
    "src/rck/rck.h": "#pragma once\nint ds__rck_fn(void);\n",
    "src/rck/rck.c": '#include "core/runtime.h"\n#include "rck/rck.h"\n'
                     "int ds__rck_fn(void) { return ds__core_fn(); }\n",
    "src/sim/sim.c": '#include "core/runtime.h"\n#include "rck/rck.h"\n'
                     "int ds__sim_fn(void);\nint ds__sim_fn(void) { return ds__rck_fn(); }\n",
    "src/assembly.h": "#pragma once\nvoid ds__assemble(void);\n",
    "src/assembly.c": '#include "assembly.h"\n#include "core/runtime.h"\n#include "sim/sim.h"\n'
                      "int ds__policy_hook(void);\n"
                      "void ds__assemble(void) { ds__hook = ds__policy_hook; }\n",
    "src/sim/sim.h": "#pragma once\nint ds__sim_fn(void);\n",
}

# name -> (files changed or added, rules expected)
BAD = {
    "a: core includes sim": ({"src/core/sched.c": '#include "sim/sim.h"\nint ds__sched;\n'}, {"a"}),
    "a: memory includes a policy header": (
        {"src/policy/p.h": "int x;\n", "src/memory/m2.c": '#include "policy/p.h"\n'}, {"a"}),
    "a: core includes the assembly's header": ({"src/core/x.c": '#include "assembly.h"\n'}, {"a"}),
    "b: policy includes core": ({"src/policy/q.c": '#include "core/runtime.h"\n'}, {"b"}),
    "b: a header of policy/ includes core": (
        {"src/policy/own.h": '#include "core/runtime.h"\n', "src/policy/r.c": '#include "own.h"\n'}, {"b"}),
    "b: policy reaches src/ with angle brackets": ({"src/policy/s.c": "#include <seam/driver.h>\n"}, {"b"}),
    "c: seam includes core": ({"src/seam/params.c": '#include "core/runtime.h"\n'}, {"c"}),
    "up: rck includes the assembly": ({"src/rck/r2.c": '#include "assembly.h"\n'}, {"up"}),
    "p: public header includes src/": ({"include/detshare/bad.h": '#include "seam/driver.h"\n'}, {"p"}),
    "u: a folder on no floor": ({"src/backend/b.c": '#include "seam/driver.h"\n'}, {"u"}),
    "up: memory includes core": (
        {"src/memory/mem.h": '#pragma once\n#include "core/runtime.h"\nint ds__mem_fn(void);\n'}, {"up"}),
    "d: rck and sim include each other": (
        {"src/rck/rck.h": '#pragma once\n#include "sim/sim.h"\nint ds__rck_fn(void);\n'}, {"d"}),
    "e: memory calls core by name": (
        {"src/memory/mem.c": "int ds__core_fn(void);\nint ds__mem_fn(void) { return ds__core_fn(); }\n"}, {"e"}),
    "e: core calls the simulator by name": (
        {"src/core/fault.c": "int ds__sim_fn(void);\nint ds__fault(void) { return ds__sim_fn(); }\n"}, {"e"}),
    "e: core reads a policy's table by name": (
        {"src/policy/tab.c": "int ds__policy_table[2];\n",
         "src/core/reg.c": "extern int ds__policy_table[2];\nint ds__reg(void) { return ds__policy_table[0]; }\n"},
        {"e"}),
    "e: seam calls core by name": (
        {"src/seam/alloc.c": "int ds__core_fn(void);\nint ds__alloc(void) { return ds__core_fn(); }\n"}, {"e"}),
    "ep: policy calls an internal function": (
        {"src/policy/p2.c": "int ds__core_fn(void);\nint ds__p2(void) { return ds__core_fn(); }\n"}, {"ep"}),
    "eu: simulator calls the assembly": (
        {"src/sim/s2.c": "void ds__assemble(void);\nvoid ds__s2(void) { ds__assemble(); }\n"}, {"eu"}),
}


def build_tree(root, files, cc, ar, cache):
    """Writes the tree under root and, with cc, compiles its sources of src/
    into an archive as meson names the members; returns the archive's path.
    Objects are shared between trees through cache (source and headers alike
    -> object), and compiled in parallel."""
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    headers = hashlib.sha1(repr(sorted((k, v) for k, v in files.items() if k.endswith(".h"))).encode())
    jobs, objs = [], []
    for rel in sorted(files):
        if not (rel.startswith("src/") and rel.endswith(".c") and module_of(rel) != "unplaced"):
            continue
        key = hashlib.sha1((headers.hexdigest() + rel + files[rel]).encode()).hexdigest()
        obj = os.path.join(cache["dir"], key, rel[4:].replace("/", "_") + ".o")
        objs.append(obj)
        if key not in cache:
            cache[key] = obj
            os.makedirs(os.path.dirname(obj))
            jobs.append(cc + ["-c", "-fPIC", "-w", "-I", os.path.join(root, "include"),
                              "-I", os.path.join(root, "src"), "-o", obj, os.path.join(root, rel)])
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for r in pool.map(lambda cmd: subprocess.run(cmd), jobs):
            if r.returncode:
                raise RuntimeError("self-test: compiling %s failed" % r.args[-1])
    lib = os.path.join(root, "libfake.a")
    subprocess.run([ar, "rcs", lib] + objs, check=True)
    return lib


def self_test():
    cc = shlex.split(os.environ.get("CC", "cc")) or ["cc"]
    ar = shutil.which(os.environ.get("AR", "ar"))
    nm = shutil.which(os.environ.get("NM", "nm"))
    if not (shutil.which(cc[0]) and ar and nm):
        print("self-test: needs a C compiler, ar and nm for the symbol rules (CC, AR, NM)")
        return 77
    ok = True
    cases = [("clean tree", {}, set())] + [(k, f, r) for k, (f, r) in BAD.items()]
    with tempfile.TemporaryDirectory(prefix="check-layers-objs-") as cache_dir:
        cache = {"dir": cache_dir}
        results = []
        for name, changes, want in cases:
            files = dict(CLEAN)
            files.update(changes)
            with tempfile.TemporaryDirectory(prefix="check-layers-") as root:
                lib = build_tree(root, files, cc, ar, cache)
                results.append((name, want, check(root, lib, quiet=True)))
    for name, want, viol in results:
        got = {r for r, _ in viol}
        if got != want:
            ok = False
            print("self-test: %s: expected rules %s, got %s" % (name, sorted(want) or "none",
                                                                sorted(got) or "none"))
            report(viol)
        else:
            print("self-test: %s: %s" % (name, "passes" if not want else
                                        "caught: " + "; ".join(t for _, t in viol)))
    print("self-test: %s" % ("ok (the clean tree passes, each rule fires on its bad tree)"
                             if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    if not 2 <= len(argv) <= 3 or argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    viol = check(os.path.abspath(argv[1]), argv[2] if len(argv) > 2 else None)
    report(viol)
    if viol:
        print("check-layers: %d violation(s); the rules are in tools/check-layers.py" % len(viol),
              file=sys.stderr)
        return 1
    print("check-layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
