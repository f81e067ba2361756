#!/usr/bin/env python3
"""Cycles between the modules of each crate of the workspace (standard library only).

Run by scripts/check-module-cycles.sh, which documents the check. The analysis reads the
source the way rustc resolves paths, only as far as a module graph needs:

- the module tree comes from `mod name;` declarations, followed from each target root
  (src/lib.rs, src/main.rs, src/bin/*.rs) to `name.rs` or `name/mod.rs`;
- an edge is a path that names another module: a `use` tree (`crate::`, `super::`,
  `self::`, or a child module's name) or a `crate::` / `super::` / `self::` path anywhere in
  the code; the item a path names belongs to the longest module prefix of the path, and an
  item a module re-exports (`pub use`) belongs to the module it comes from;
- comments, string literals and items under `#[cfg(test)]` (test modules above all) are left
  out, and so are tests/ and benches/, which are not in the module tree;
- an edge counts between the two children of the lowest module holding both ends: the crate
  root's children (the top-level modules), or the children of one module among themselves.

A cycle is written `crate: a -> b -> a`, starting at its smallest module, so that the same
cycle always reads the same; the allow-list holds such lines.
"""

import argparse
import os
import re
import sys

MAX_CYCLES = 2000


class Token:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self):
        return f"{self.kind}:{self.text}@{self.line}"


IDENT_START = re.compile(r"[A-Za-z_]")
IDENT = re.compile(r"[A-Za-z0-9_]*")


def tokenize(src):
    """Identifiers, `::` and single punctuation, with lines; comments and literals dropped."""
    toks = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += src[i] == "\n"
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(src, i)) and (
            i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            line += src.count("\n", i, j)
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and
                          (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            i += 2 if c == "b" else 1
            while i < n and src[i] != '"':
                if src[i] == "\\":
                    i += 1
                if i < n and src[i] == "\n":
                    line += 1
                i += 1
            i += 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime / label ('a, 'static).
            m = re.compile(r"'(\\(u\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}|.)|[^\\'\n])'").match(src, i)
            if m:
                i = m.end()
            else:
                i += 1
                i = IDENT.match(src, i).end()
        elif IDENT_START.match(c):
            j = IDENT.match(src, i + 1).end()
            # b'x' byte literals
            if src[i:j] == "b" and j < n and src[j] == "'":
                m = re.compile(r"'(\\.|[^\\'])'").match(src, j)
                if m:
                    i = m.end()
                    continue
            toks.append(Token("id", src[i:j], line))
            i = j
        elif c.isdigit():
            i = re.compile(r"[0-9][0-9A-Za-z_.]*").match(src, i).end()
        elif src.startswith("::", i):
            toks.append(Token("p", "::", line))
            i += 2
        else:
            toks.append(Token("p", c, line))
            i += 1
    return toks


def matching(toks, i, open_, close):
    """Index just past the bracket closing the one at toks[i]."""
    depth = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "p" and t.text == open_:
            depth += 1
        elif t.kind == "p" and t.text == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def is_test_cfg(attr):
    """`#[cfg(test)]` or `#[cfg(all(test, ...))]`: code that exists only in tests."""
    words = [t.text for t in attr]
    text = "".join(words)
    return text.startswith("cfg(test)") or text.startswith("cfg(all(test,") or text == "cfg(all(test))"


def item_end(toks, i):
    """Index past the item starting at toks[i]: its `;` or its closing brace at depth 0."""
    depth = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "p":
            if t.text in "([":
                depth += 1
            elif t.text in ")]":
                depth -= 1
            elif t.text == "{":
                if depth == 0:
                    end = matching(toks, i, "{", "}")
                    # `struct S { .. }` ends here; `let x = S { .. };` does not, but items do.
                    return end
                depth += 1
            elif t.text == "}":
                depth -= 1
            elif t.text == ";" and depth == 0:
                return i + 1
        i += 1
    return i


def parse_use_tree(toks, i, prefix, out):
    """Parse a use tree at toks[i] with path `prefix`; append (segments, alias, line)."""
    segs = list(prefix)
    line = toks[i].line if i < len(toks) else 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "p" and t.text == "{":
            i += 1
            while i < len(toks) and not (toks[i].kind == "p" and toks[i].text == "}"):
                i = parse_use_tree(toks, i, segs, out)
                if i < len(toks) and toks[i].kind == "p" and toks[i].text == ",":
                    i += 1
            return i + 1
        if t.kind == "p" and t.text == "*":
            out.append((segs, "*", t.line))
            return i + 1
        if t.kind == "id":
            if t.text == "self" and segs:
                # `use a::{self}`: the module a itself
                alias = segs[-1]
                i += 1
                if i + 1 < len(toks) and toks[i].text == "as":
                    alias = toks[i + 1].text
                    i += 2
                out.append((segs, alias, t.line))
                return i
            segs = segs + [t.text]
            line = t.line
            i += 1
            if i < len(toks) and toks[i].kind == "p" and toks[i].text == "::":
                i += 1
                continue
            alias = segs[-1]
            if i + 1 < len(toks) and toks[i].text == "as":
                alias = toks[i + 1].text
                i += 2
            out.append((segs, alias, line))
            return i
        if t.kind == "p" and t.text == "::":
            i += 1
            continue
        return i + 1
    return i


class Module:
    def __init__(self, path, file, inline_of=None):
        self.path = path          # tuple of segments from the crate root
        self.file = file          # the file holding it
        self.file_module = inline_of or path  # the file-level module it belongs to
        self.children = set()
        self.uses = []            # (segments relative to this module's context, line, is_use)
        self.reexports = {}       # alias -> (module path, segments, line)


class Crate:
    """One target (lib, main or bin) of one package."""

    def __init__(self, name, root_file, repo_root):
        self.name = name
        self.repo_root = repo_root
        self.modules = {}
        self.load((), root_file, True)

    def rel(self, file):
        return os.path.relpath(file, self.repo_root)

    def load(self, path, file, is_dir_owner):
        try:
            with open(file, encoding="utf-8") as f:
                src = f.read()
        except OSError:
            return
        mod = Module(path, file)
        self.modules[path] = mod
        base = os.path.dirname(file) if is_dir_owner else file[:-3]
        toks = tokenize(src)
        self.scan(toks, 0, len(toks), mod, file, base)

    def scan(self, toks, i, end, mod, file, base):
        pending_test = False
        while i < end:
            t = toks[i]
            if t.kind == "p" and t.text == "#":
                j = i + 1
                inner = j < end and toks[j].text == "!"
                if inner:
                    j += 1
                if j < end and toks[j].text == "[":
                    close = matching(toks, j, "[", "]")
                    if is_test_cfg(toks[j + 1:close - 1]):
                        if inner and mod.path:
                            return  # `#![cfg(test)]`: the whole module is test code
                        pending_test = True
                    i = close
                    continue
            if pending_test:
                pending_test = False
                i = item_end(toks, i)
                continue
            if t.kind == "id" and t.text == "mod" and i + 1 < end and toks[i + 1].kind == "id":
                name = toks[i + 1].text
                nxt = toks[i + 2] if i + 2 < end else None
                if nxt is not None and nxt.text == ";":
                    child = mod.path + (name,)
                    mod.children.add(name)
                    for cand, owner in ((os.path.join(base, name + ".rs"), False),
                                        (os.path.join(base, name, "mod.rs"), True)):
                        if os.path.exists(cand):
                            self.load(child, cand, owner)
                            break
                    i += 3
                    continue
                if nxt is not None and nxt.text == "{":
                    close = matching(toks, i + 2, "{", "}")
                    child = mod.path + (name,)
                    mod.children.add(name)
                    inline = Module(child, file, inline_of=mod.file_module)
                    self.modules[child] = inline
                    self.scan(toks, i + 3, close - 1, inline, file, os.path.join(base, name))
                    i = close
                    continue
            if t.kind == "id" and t.text == "use":
                vis_pub = self.is_pub(toks, i)
                j = i
                while j < end and toks[j].text != ";":
                    j += 1
                j += 1
                out = []
                parse_use_tree(toks[i + 1:j - 1], 0, [], out)
                for segs, alias, line in out:
                    if segs and segs[0] == "":
                        continue
                    mod.uses.append((segs, line, True))
                    if vis_pub and alias not in ("*", "_"):
                        mod.reexports[alias] = segs
                i = j
                continue
            if (t.kind == "id" and t.text in ("crate", "super", "self")
                    and i + 1 < end and toks[i + 1].text == "::"
                    and not (i > 0 and toks[i - 1].text == "$")
                    and not (i > 1 and toks[i - 1].text == "in" and toks[i - 2].text == "(")
                    and not (i > 0 and toks[i - 1].text == "::")):
                segs, j = [t.text], i + 1
                while j + 1 < end and toks[j].text == "::" and toks[j + 1].kind == "id":
                    segs.append(toks[j + 1].text)
                    j += 2
                mod.uses.append((segs, t.line, False))
                i = j
                continue
            i += 1

    @staticmethod
    def is_pub(toks, i):
        """Whether the `use` at toks[i] has a `pub` visibility (`pub`, `pub(crate)`, ...)."""
        j = i - 1
        if j >= 0 and toks[j].text == ")":
            while j >= 0 and toks[j].text != "(":
                j -= 1
            j -= 1
        return j >= 0 and toks[j].text == "pub"

    def absolute(self, mod, segs, is_use):
        """The path from the crate root that `segs`, written in `mod`, names (or None)."""
        base = list(mod.path)
        k = 0
        if segs[0] == "crate":
            base, k = [], 1
        elif segs[0] == "self":
            k = 1
        elif segs[0] == "super":
            while k < len(segs) and segs[k] == "super":
                if not base:
                    return None
                base.pop()
                k += 1
        elif is_use and segs[0] in mod.children:
            k = 0
        else:
            return None
        return tuple(base) + tuple(segs[k:])

    def resolve(self, path, depth=0):
        """The module owning the item at `path`, through re-exports."""
        for n in range(len(path), -1, -1):
            prefix = path[:n]
            if prefix in self.modules:
                owner = self.modules[prefix]
                if n < len(path) and depth < 8 and path[n] in owner.reexports:
                    target = self.absolute(owner, owner.reexports[path[n]], True)
                    if target is not None and target != path[:n + 1]:
                        return self.resolve(target + tuple(path[n + 1:]), depth + 1)
                return owner.file_module
        return None

    def edges(self):
        """{(parent, a, b): (file, line)}: child a of parent names something in child b."""
        found = {}
        for mod in self.modules.values():
            src = mod.file_module
            for segs, line, is_use in mod.uses:
                path = self.absolute(mod, segs, is_use)
                if path is None:
                    continue
                dst = self.resolve(path)
                if dst is None:
                    continue
                common = 0
                while common < min(len(src), len(dst)) and src[common] == dst[common]:
                    common += 1
                if common >= len(src) or common >= len(dst):
                    continue  # one is an ancestor of the other
                key = (src[:common], src[:common + 1], dst[:common + 1])
                loc = (self.rel(mod.file), line)
                if key not in found or loc < found[key]:
                    found[key] = loc
        return found


def elementary_cycles(graph):
    """Every elementary cycle of a small directed graph, each starting at its smallest node."""
    cycles = []
    nodes = sorted(graph)
    for start in nodes:
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path, on_path = [start], {start}
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                on_path.discard(path.pop())
                continue
            if nxt == start:
                cycles.append(list(path))
                if len(cycles) > MAX_CYCLES:
                    return cycles
            elif nxt > start and nxt not in on_path:
                path.append(nxt)
                on_path.add(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return cycles


def fmt_mod(path):
    return "::".join(path)


def cycle_line(crate, cycle):
    return f"{crate}: " + " -> ".join(fmt_mod(m) for m in cycle + [cycle[0]])


def normalize(line):
    """An allow-list line in the canonical form: rotated to start at its smallest module."""
    crate, sep, rest = line.partition(": ")
    mods = [m.strip() for m in rest.split("->")]
    if not sep or len(mods) < 3 or mods[0] != mods[-1] or not all(mods):
        return None
    ring = mods[:-1]
    k = ring.index(min(ring, key=lambda m: tuple(m.split("::"))))
    ring = ring[k:] + ring[:k]
    return f"{crate.strip()}: " + " -> ".join(ring + [ring[0]])


def workspace_crates(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    members = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    crates = []
    for member in members:
        src = os.path.join(root, member, "src")
        targets = [("lib.rs", member), ("main.rs", member + "/main.rs")]
        for file, name in targets:
            if os.path.exists(os.path.join(src, file)):
                crates.append((member, name, os.path.join(src, file)))
        bindir = os.path.join(src, "bin")
        if os.path.isdir(bindir):
            for file in sorted(os.listdir(bindir)):
                if file.endswith(".rs"):
                    crates.append((member, f"{member}/bin/{file}", os.path.join(bindir, file)))
    return members, crates


def analyze(root):
    """(number of packages, [(cycle line, [edge lines])]) for the workspace at root."""
    members, targets = workspace_crates(root)
    found = []
    for member, name, file in targets:
        crate = Crate(name, file, root)
        edges = crate.edges()
        graphs = {}
        for (parent, a, b) in edges:
            graphs.setdefault(parent, {}).setdefault(a, set()).add(b)
        for parent in sorted(graphs):
            cycles = elementary_cycles(graphs[parent])
            if len(cycles) > MAX_CYCLES:
                print(f"module cycles: {name}: more than {MAX_CYCLES} cycles under "
                      f"{fmt_mod(parent) or 'the crate root'}; only the first are listed",
                      file=sys.stderr)
            for cycle in cycles:
                ring = cycle + [cycle[0]]
                where = []
                for x, y in zip(ring, ring[1:]):
                    f, line = edges[(parent, x, y)]
                    where.append(f"    {fmt_mod(x)} -> {fmt_mod(y)}  {f}:{line}")
                found.append((cycle_line(name, cycle), where))
    return len(members), found


def read_allow(path):
    allowed, bad = {}, []
    if not path or not os.path.exists(path):
        return allowed, bad
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            norm = normalize(line)
            if norm is None:
                bad.append(f"{path}:{n}: not a cycle `crate: a -> b -> a`: {line}")
            else:
                allowed[norm] = n
    return allowed, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="the workspace's directory")
    ap.add_argument("--allow", help="allow-list file: cycles known and to be removed")
    ap.add_argument("--list", action="store_true", help="print every cycle, allowed or not")
    args = ap.parse_args()

    crates, found = analyze(args.root)
    allowed, bad = read_allow(args.allow)
    lines = {c for c, _ in found}
    new = [(c, w) for c, w in found if c not in allowed]
    known = [(c, w) for c, w in found if c in allowed]
    stale = sorted((n, c) for c, n in allowed.items() if c not in lines)

    for msg in bad:
        print(f"module cycles: {msg}", file=sys.stderr)
    if known:
        print(f"module cycles: {len(known)} allowed by {args.allow}, each to be removed:")
        for c, where in known:
            print(f"  {c}")
            if args.list:
                print("\n".join(where))
    if new:
        print(f"module cycles: {len(new)} new cycle(s), not in the allow-list:", file=sys.stderr)
        for c, where in new:
            print(f"  {c}", file=sys.stderr)
            print("\n".join(where), file=sys.stderr)
        print("module cycles: break each cycle (move the shared item down into a module both "
              "can use, or invert the dependency)", file=sys.stderr)
    if stale:
        print(f"module cycles: {len(stale)} allowed cycle(s) no longer found; remove them from "
              f"{args.allow}:", file=sys.stderr)
        for n, c in stale:
            print(f"  {args.allow}:{n}: {c}", file=sys.stderr)
    if new or stale or bad:
        return 1
    if known:
        print(f"module cycles: none new in {crates} crates")
    else:
        print(f"module cycles: none in {crates} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
