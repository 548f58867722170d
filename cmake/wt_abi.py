#!/usr/bin/env python3
"""wt_abi.py: each library exports what the headers declare (docs/libraries.md).

The version nodes are WT_0.1 and WT_PRIVATE_0.1 for the SONAME
libwt_X.so.0.1 (--abi-version; WT_<V> and WT_PRIVATE_<V> in general).
Three commands:

  decls --cc CC --out FILE --public H... --private H... [-- CFLAGS...]
      The functions and variables the headers declare: the headers are run
      through the C preprocessor together (so that a declaration a macro
      writes counts) and each top-level declaration is attributed to the
      header it is written in. FILE gets one line per name, "public NAME
      HEADER" (an installed header) or "private NAME HEADER" (a header wt's
      libraries share among themselves); it is rewritten only when that
      changes.

  map --decls FILE --readelf READELF --out MAP --abi-version 0.1
      [--generated] OBJECT...
      A library's linker version script, written at its link (PRE_LINK)
      from its objects: each symbol they define with default visibility
      goes into WT_0.1 when an installed header declares it, into
      WT_PRIVATE_0.1 when a private one does; `local: *` hides the rest.
      A default-visibility symbol no header declares fails the link, but
      in generated code (--generated: protoc-c's, which leaves a few
      tables non-static) and the compiler's own (__asan_..., __odr_asan...).

  check (--prefix PREFIX | --install BUILD) [--abi-version 0.1]
      [--python DIR] [--nm NM]
      Checks an installed tree (PREFIX; or BUILD installed into a
      temporary one with cmake --install, the `abi` test): every symbol each
      lib/libwt_*.so exports is either in WT_0.1 and declared in an
      installed header, or in WT_PRIVATE_0.1 and declared in none; every
      function and variable the installed headers declare is exported by
      exactly one library, in WT_0.1; every wt_ name the Python package
      (DIR) names that a library exports is public. Prints one line of
      counts per library.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict

# The nodes, WT_<V> and WT_PRIVATE_<V>, V the SONAME's version
# (MAJOR.MINOR, --abi-version): set_nodes().
PUBLIC, PRIVATE = "WT_0.1", "WT_PRIVATE_0.1"


def set_nodes(version):
    global PUBLIC, PRIVATE
    if not re.fullmatch(r"\d+\.\d+", version or ""):
        sys.exit("wt_abi: ABI version %r is not MAJOR.MINOR" % version)
    PUBLIC, PRIVATE = "WT_" + version, "WT_PRIVATE_" + version
LIBRARIES = ("proto", "base", "common", "server", "client", "consumer")

# --- a C declaration scanner, over preprocessed text ------------------------

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<id>[A-Za-z_]\w*)
  | (?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)
  | (?P<punct>\.\.\.|->|<<=|>>=|[<>=!+\-*/%&|^]=|&&|\|\||\+\+|--|<<|>>|\S)
""", re.X)
LINEMARK = re.compile(r'#\s*(?:line\s+)?\d+\s+"((?:\\.|[^"\\])*)"')
# Words that never name what a declaration declares.
SKIP_GROUPS = {"__attribute__", "__attribute", "__asm__", "__asm", "asm",
               "__declspec", "_Alignas", "__typeof__", "typeof",
               "__typeof"}
DROP = {"__extension__", "__restrict", "__restrict__", "restrict",
        "__inline", "__inline__", "_Noreturn", "__const", "__volatile__"}
TAGS = {"struct", "union", "enum"}


def tokens(text):
    """(file, token) for every token of preprocessed text; `file` is the
    header the token is written in (from the line markers)."""
    where = "<none>"
    for line in text.splitlines():
        s = line.lstrip()
        if s.startswith("#"):
            m = LINEMARK.match(s)
            if m:
                where = m.group(1)
            continue  # a marker or a #pragma: no declaration
        for m in TOKEN.finditer(line):
            if m.lastgroup != "ws":
                yield where, m.group()


def statements(toks):
    """Top-level declarations: (file where it starts, its tokens), each
    ended by `;` outside brackets, or a function's body."""
    cur, where, depth = [], None, 0
    for f, t in toks:
        if not cur:
            where = f
        if t in "({[":
            # A function's body: `{` at depth 0 after a declarator's `)`.
            if t == "{" and depth == 0 and cur and cur[-1] == ")" \
                    and cur[0] not in TAGS and cur[0] != "typedef":
                cur.append("{BODY")
            depth += 1
            cur.append(t)
            continue
        if t in ")}]":
            depth -= 1
            cur.append(t)
            if depth == 0 and t == "}" and "{BODY" in cur:
                cur, depth = [], 0  # a definition (static inline): no ABI
            continue
        if t == ";" and depth == 0:
            yield where, cur
            cur = []
            continue
        cur.append(t)


def strip_groups(ts):
    """`ts` without __attribute__((...)) and the like, nor bodies of
    struct/union/enum."""
    out, i = [], 0
    while i < len(ts):
        t = ts[i]
        if t in SKIP_GROUPS and i + 1 < len(ts) and ts[i + 1] == "(":
            i = skip_group(ts, i + 1)
            continue
        if t in DROP:
            i += 1
            continue
        if t == "{":
            i = skip_group(ts, i)
            out.append("{}")
            continue
        out.append(t)
        i += 1
    return out


def skip_group(ts, i):
    """The index after the bracket group opening at ts[i]."""
    depth = 0
    while i < len(ts):
        if ts[i] in "({[":
            depth += 1
        elif ts[i] in ")}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def split_top(ts, sep=","):
    parts, cur, depth = [], [], 0
    for t in ts:
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        if t == sep and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


def is_id(t):
    return re.fullmatch(r"[A-Za-z_]\w*", t) is not None


def declarator_name(ts):
    """(name, "func"|"var") of one declarator, or None."""
    # A parenthesised declarator: (*name)(...), (*name[4]), (*name(args))(...)
    for i, t in enumerate(ts):
        if t == "(" and i + 1 < len(ts) and ts[i + 1] == "*":
            j = i + 1
            while j < len(ts) and ts[j] in ("*", "const", "volatile"):
                j += 1
            if j < len(ts) and is_id(ts[j]):
                func = j + 1 < len(ts) and ts[j + 1] == "("
                return ts[j], "func" if func else "var"
            return None
        if t == "(":
            break
    # name( ... ): a function.
    for i, t in enumerate(ts):
        if t == "(":
            if i > 0 and is_id(ts[i - 1]):
                return ts[i - 1], "func"
            return None
    # A variable: the last identifier before `[` or `=`.
    name = None
    for t in ts:
        if t in ("[", "="):
            break
        if is_id(t):
            name = t
    return (name, "var") if name else None


STORAGE_SKIP = {"typedef", "static", "_Static_assert", "static_assert"}


def declared(ts):
    """The names one top-level declaration declares (functions and
    variables; not types, not static or inline definitions)."""
    if not ts or ts[0] in STORAGE_SKIP or "static" in ts:
        return []
    ts = strip_groups(ts)
    if not ts:
        return []
    # `struct x;`, `struct x {...};`, `enum {...};`: a type, no declarator.
    rest = ts[:]
    while rest and rest[0] in ("const", "volatile", "extern"):
        rest = rest[1:]
    if rest and rest[0] in TAGS:
        tail = rest[1:]
        if tail and is_id(tail[0]):
            tail = tail[1:]
        if tail in ([], ["{}"]):
            return []
    out = []
    parts = split_top(ts)
    for k, part in enumerate(parts):
        if k > 0:  # `int a, *b;`: the later declarators, without specifiers
            part = ["int"] + part
        got = declarator_name(part)
        if got and got[0] not in TAGS:
            out.append(got)
    return out


def header_decls(cc, cflags, headers, wanted):
    """{name: (kind, header)} for what `headers` declare; `wanted` maps a
    header's real path to the class the caller gives it."""
    src = "".join('#include "%s"\n' % h for h in headers)
    cmd = [cc, "-E", "-x", "c", "-std=c11", *cflags, "-"]
    p = subprocess.run(cmd, input=src, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("wt_abi: the preprocessor failed (%s):\n%s" %
                 (shlex.join(cmd), p.stderr))
    out = {}
    real = {}
    for where, ts in statements(tokens(p.stdout)):
        if where not in real:
            real[where] = os.path.realpath(where)
        cls = wanted.get(real[where])
        if cls is None:
            continue
        for name, kind in declared(ts):
            # A name both kinds of header declare is public.
            if name not in out or cls == "public":
                out[name] = (cls, kind, real[where])
    return out


def write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# --- decls -------------------------------------------------------------------

def cmd_decls(a):
    wanted = {}
    for h in a.private:
        wanted[os.path.realpath(h)] = "private"
    for h in a.public:
        wanted[os.path.realpath(h)] = "public"
    found = header_decls(a.cc, a.cflags, a.public + a.private, wanted)
    for h in wanted:
        if not os.path.exists(h):
            sys.exit("wt_abi: no header %s" % h)
    lines = sorted("%s %s %s %s\n" % (cls, name, kind, h)
                   for name, (cls, kind, h) in found.items())
    write_if_changed(a.out, "".join(lines))
    if a.stamp:
        with open(a.stamp, "w") as f:
            f.write("%d\n" % len(lines))


def read_decls(path):
    out = {}
    with open(path) as f:
        for line in f:
            cls, name, kind, h = line.split(" ", 3)
            out[name] = (cls, kind, h.strip())
    return out


# --- map ---------------------------------------------------------------------

def object_exports(readelf, objects):
    """Names the objects define, global or weak, with default (or
    protected) visibility."""
    out = set()
    p = subprocess.run([readelf, "-sW", *objects], capture_output=True,
                       text=True)
    if p.returncode != 0:
        sys.exit("wt_abi: %s failed:\n%s" % (readelf, p.stderr))
    for line in p.stdout.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0].endswith(":") or not f[0][:-1].isdigit():
            continue
        typ, bind, vis, ndx, name = f[3], f[4], f[5], f[6], f[7]
        if bind not in ("GLOBAL", "WEAK") or ndx == "UND":
            continue
        if vis not in ("DEFAULT", "PROTECTED") or typ in ("SECTION", "FILE"):
            continue
        out.add(name)
    return out


def cmd_map(a):
    set_nodes(a.abi_version)
    decls = read_decls(a.decls)
    exported = object_exports(a.readelf, a.objects)
    public = sorted(n for n in exported if decls.get(n, ("",))[0] == "public")
    private = sorted(n for n in exported
                     if decls.get(n, ("",))[0] == "private")
    undeclared = sorted(n for n in exported - set(public) - set(private)
                        # the compiler's own (sanitizers, coverage)
                        if not n.startswith("__"))
    if undeclared and a.generated:
        undeclared = []  # generated code's: hidden by `local: *`
    if undeclared:
        sys.exit("wt_abi: %s: %d symbol(s) with default visibility that no "
                 "header declares (declare each in an installed header, or "
                 "between WT_API_BEGIN and WT_API_END of a private one, or "
                 "make it static or hidden): %s" %
                 (os.path.basename(a.out), len(undeclared),
                  " ".join(undeclared)))
    body = ["/* Generated by cmake/wt_abi.py from the objects of %s and the "
            "headers\n * (docs/libraries.md, \"The ABI\"). */\n"
            % os.path.basename(a.out).replace(".map", "")]
    body.append("%s {\n  global:\n" % PUBLIC)
    body += ["    %s;\n" % n for n in public]
    body.append("  local:\n    *;\n};\n\n")
    body.append("/* wt's own libraries, tools and tests only: no promise. */\n")
    body.append("%s {\n" % PRIVATE)
    if private:
        body.append("  global:\n")
        body += ["    %s;\n" % n for n in private]
    body.append("};\n")
    write_if_changed(a.out, "".join(body))


# --- check -------------------------------------------------------------------

def dynamic_exports(nm, lib):
    """{name: version} of what `lib` exports (version "" when none)."""
    p = subprocess.run([nm, "-D", "--defined-only", "--with-symbol-versions",
                        lib], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("wt_abi: %s %s failed:\n%s" % (nm, lib, p.stderr))
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        typ, sym = f[1], f[2]
        name, _, ver = sym.partition("@")
        ver = ver.lstrip("@")
        if typ == "A" and not ver and name in (PUBLIC, PRIVATE):
            continue  # a version's own definition
        out[name] = ver
    return out


def python_names(pkg):
    """Every "wt_..." string literal in the package's modules."""
    names = set()
    for root, _, files in os.walk(pkg):
        for fn in files:
            if fn.endswith(".py"):
                with open(os.path.join(root, fn)) as f:
                    names |= set(re.findall(r"""["'](wt_\w+)["']""",
                                            f.read()))
    return names


def find_library(libdir, stem):
    plain = os.path.join(libdir, stem + ".so")
    if os.path.exists(plain):
        return os.path.realpath(plain)
    versioned = sorted(f for f in os.listdir(libdir)
                       if f.startswith(stem + ".so."))
    return os.path.join(libdir, versioned[0]) if versioned else None


def cmd_check(a):
    if a.install:
        with tempfile.TemporaryDirectory(prefix="wt-abi.") as tmp:
            p = subprocess.run([a.cmake, "--install", a.install, "--prefix",
                                tmp], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("wt_abi: cmake --install %s failed:\n%s%s" %
                         (a.install, p.stdout, p.stderr))
            return check_prefix(a, tmp)
    return check_prefix(a, a.prefix)


def check_prefix(a, prefix):
    prefix = os.path.abspath(prefix)
    version = a.abi_version
    if not version:  # the SONAME's: libwt_client.so.0.1(.0)
        client = find_library(os.path.join(prefix, "lib"), "libwt_client")
        m = re.search(r"\.so\.(\d+\.\d+)", client or "")
        version = m.group(1) if m else None
    set_nodes(version)
    inc = os.path.join(prefix, "include")
    headers = sorted(os.path.join(r, f) for r, _, fs in os.walk(inc)
                     for f in fs if f.endswith(".h"))
    # The headers as a program built against the tree sees them.
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join(
        [os.path.join(prefix, "lib", "pkgconfig")] +
        ([env["PKG_CONFIG_PATH"]] if env.get("PKG_CONFIG_PATH") else []))
    p = subprocess.run(["pkg-config", "--cflags", "wt-server", "wt-client",
                        "wt-consumer"], capture_output=True, text=True,
                       env=env)
    if p.returncode != 0:
        sys.exit("wt_abi: pkg-config --cflags failed:\n" + p.stderr)
    cflags = shlex.split(p.stdout)
    decls = header_decls(a.cc, cflags, headers,
                         {os.path.realpath(h): "public" for h in headers})
    problems = []
    exported_by = defaultdict(list)
    for lib in LIBRARIES:
        stem = "libwt_" + lib
        path = find_library(os.path.join(prefix, "lib"), stem)
        if path is None:
            problems.append("%s: not installed" % stem)
            continue
        n = {"public": 0, "private": 0, "undeclared": 0}
        for name, ver in sorted(dynamic_exports(a.nm, path).items()):
            exported_by[name].append((lib, ver))
            public = name in decls
            if ver == PUBLIC and public:
                n["public"] += 1
            elif ver == PRIVATE and not public:
                n["private"] += 1
            else:
                n["undeclared"] += 1
                if public:
                    why = "declared in %s but exported in %s" % (
                        os.path.relpath(decls[name][2], inc), ver or
                        "no version")
                elif ver == PUBLIC:
                    why = "exported in %s, declared in no installed header" % ver
                else:
                    why = "exported in %s" % (ver or "no version")
                problems.append("%s: %s: %s" % (os.path.basename(path), name,
                                                why))
        print("abi: %s: %d public (%s), %d private (%s), %d undeclared" %
              (os.path.basename(path), n["public"], PUBLIC, n["private"],
               PRIVATE, n["undeclared"]))
    dangling = 0
    for name, (_, kind, h) in sorted(decls.items()):
        where = [lib for lib, ver in exported_by.get(name, ())
                 if ver == PUBLIC]
        if len(where) != 1:
            dangling += 1
            problems.append("%s: %s %s %s" % (
                os.path.relpath(h, inc), "function" if kind == "func"
                else "variable", name,
                "exported in %s by none of the libraries" % PUBLIC
                if not where else "exported by " + ", ".join(where)))
    print("abi: %d functions and variables in %d installed headers, %d not "
          "exported once in %s" % (len(decls), len(headers), dangling, PUBLIC))
    if a.python:
        names = python_names(a.python)
        used = sorted(n for n in names if n in exported_by)
        for name in used:
            vers = {ver for _, ver in exported_by[name]}
            if vers != {PUBLIC}:
                problems.append("python: %s is loaded from a library, which "
                                "exports it in %s" % (name, ", ".join(
                                    sorted(v or "no version" for v in vers))))
        print("abi: the Python package names %d exported functions, %d not "
              "public" % (len(used), sum(1 for p in problems
                                          if p.startswith("python:"))))
    for p in problems:
        print("  " + p)
    print("abi: %s" % ("OK" if not problems else "%d problem(s)" %
                        len(problems)))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("decls")
    d.add_argument("--cc", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--stamp")
    d.add_argument("--public", nargs="*", default=[])
    d.add_argument("--private", nargs="*", default=[])
    d.add_argument("cflags", nargs="*")
    m = sub.add_parser("map")
    m.add_argument("--decls", required=True)
    m.add_argument("--readelf", default="readelf")
    m.add_argument("--out", required=True)
    m.add_argument("--abi-version", required=True, help="MAJOR.MINOR")
    m.add_argument("--generated", action="store_true",
                   help="generated code: hide what no header declares")
    m.add_argument("objects", nargs="+")
    c = sub.add_parser("check")
    where = c.add_mutually_exclusive_group(required=True)
    where.add_argument("--prefix")
    where.add_argument("--install", metavar="BUILD")
    c.add_argument("--cmake", default="cmake")
    c.add_argument("--abi-version",
                   help="MAJOR.MINOR (default: libwt_client's SONAME's)")
    c.add_argument("--cc", default=os.environ.get("CC", "cc"))
    c.add_argument("--nm", default="nm")
    c.add_argument("--python")
    a = ap.parse_args()
    if a.cmd == "decls":
        cmd_decls(a)
    elif a.cmd == "map":
        cmd_map(a)
    else:
        sys.exit(cmd_check(a))


if __name__ == "__main__":
    main()
