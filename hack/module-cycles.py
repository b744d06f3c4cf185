#!/usr/bin/env python3
"""Lists the import cycles between the modules of each crate of the workspace (CONTRIBUTING: "no import
cycle inside a crate").

    hack/module-cycles.py [-v] [CRATE_DIR ...]    (default: every member of the workspace Cargo.toml)

A module depends on a sibling when code anywhere below it names an item below the sibling: `crate::a::…`,
`super::…`, `self::…` or a child module's name, in `use` trees and in paths alike, following the `use`
re-exports of the module named (`crate::Foo` where lib.rs has `pub use a::Foo` points at `a`). Siblings
are compared under their nearest common parent, so `a::x → b::y` is the edge `a → b` of the crate root and
a child naming its own parent is no edge. Comments and string literals are skipped. Each cycle is printed
with the places that make its edges (all of them with -v); the exit status is 1 when any crate has one.
"""

import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ROOT = Path(__file__).resolve().parent.parent


def strip_comments_and_strings(text):
    """The text with comments and string/char literals blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        else:
            m = re.compile(r'b?r(#*)"').match(text, i)
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                end = text.find('"' + m.group(1), m.end())
                end = n if end < 0 else end + 1 + len(m.group(1))
                out.append('""' + "\n" * text.count("\n", i, end))
                i = end
            elif c == '"':
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                out.append('""' + "\n" * text.count("\n", i, j))
                i = j + 1
            else:
                m = re.compile(r"'(\\.[^']*|[^\\'\n])'").match(text, i)
                if c == "'" and m:
                    out.append("' '")
                    i = m.end()
                else:
                    out.append(c)
                    i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}}` -> [(["a", "b"], "b"), (["a", "c", "d"], "d"), (["a", "c", "e"], "f")]."""
    tree = re.sub(r"\s+as\s+(" + IDENT + ")", r"@\1", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def leaf(prefix, text):
        if not text:
            return
        text, _, alias = text.partition("@")
        segs = prefix + [p for p in text.split("::") if p]
        if len(segs) > 1 and segs[-1] == "self":
            segs = segs[:-1]
        out.append((segs, alias or segs[-1]))

    def parse(pos, prefix):
        cur = ""
        while pos < len(tree):
            ch = tree[pos]
            if ch == "{":
                pos = parse(pos + 1, prefix + [p for p in cur.split("::") if p])
                cur = ""
            elif ch == "}":
                leaf(prefix, cur)
                return pos + 1
            elif ch == ",":
                leaf(prefix, cur)
                cur, pos = "", pos + 1
            else:
                cur, pos = cur + ch, pos + 1
        leaf(prefix, cur)
        return pos

    parse(0, [])
    return out


class Module:
    """One module: where its body is, its child modules and what its `use` declarations name."""

    def __init__(self, path, file):
        self.path = path  # tuple of names from the crate root
        self.file = file  # the file that holds its body (None until found)
        self.children = {}  # name -> child path tuple
        self.uses = {}  # imported name -> (scope, path segments as written)


def rel(path):
    """`path` relative to the repository when it is inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def scan_file(crate, path, file, text):
    """Records the modules of `file` (inline ones too) and returns its path references."""
    code = strip_comments_and_strings(text)
    crate.setdefault(path, Module(path, file))
    refs = []  # (scope path, segments, line)
    stack = [(path, -1)]  # (scope, brace depth at which it opened)
    depth = 0
    token = re.compile(
        r"(?P<mod>\bmod\s+(?P<modname>" + IDENT + r")\s*(?P<modend>[;{]))"
        r"|(?P<use>\buse\s+(?P<tree>[^;]*);)"
        r"|(?P<path>(?<![\w:])" + IDENT + r"(?:\s*::\s*" + IDENT + r")+)"
        r"|(?P<open>\{)|(?P<close>\})"
    )
    for m in token.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        scope = stack[-1][0]
        if m.group("mod"):
            child = scope + (m.group("modname"),)
            crate.setdefault(scope, Module(scope, file)).children[m.group("modname")] = child
            if m.group("modend") == "{":
                crate.setdefault(child, Module(child, file))
                stack.append((child, depth))
                depth += 1
            else:
                crate.setdefault(child, Module(child, None))
        elif m.group("use"):
            for segs, alias in expand_use_tree(m.group("tree")):
                if segs[-1] == "*":
                    refs.append((scope, segs[:-1], line))
                    continue
                refs.append((scope, segs, line))
                crate.setdefault(scope, Module(scope, file)).uses[alias] = (scope, segs)
        elif m.group("path"):
            segs = [s.strip() for s in m.group("path").split("::")]
            refs.append((scope, segs, line))
        elif m.group("open"):
            depth += 1
        elif m.group("close"):
            depth -= 1
            if len(stack) > 1 and stack[-1][1] == depth:
                stack.pop()
    return refs


def load_crate(crate_dir):
    """The module tree and path references of each of the crate's roots (src/lib.rs, src/main.rs)."""
    src = crate_dir / "src"
    crates = []
    for root in (p for p in (src / "lib.rs", src / "main.rs") if p.exists()):
        modules, refs, todo = {}, [], [((), root)]
        while todo:
            path, file = todo.pop()
            text = file.read_text(encoding="utf-8")
            refs += [(scope, segs, line, file) for scope, segs, line in scan_file(modules, path, file, text)]
            # `mod x;` of this file (or of an inline module in it): x.rs or x/mod.rs beside or below it.
            folder = file.parent if file.name in ("mod.rs", "lib.rs", "main.rs") else file.with_suffix("")
            for child, mod in list(modules.items()):
                parent = modules.get(child[:-1])
                if mod.file is not None or not child or parent is None or parent.file != file:
                    continue
                base = folder.joinpath(*child[len(path):-1])
                for cand in (base / f"{child[-1]}.rs", base / child[-1] / "mod.rs"):
                    if cand.exists():
                        mod.file = cand
                        todo.append((child, cand))
                        break
        crates.append((root, modules, refs))
    return crates


def resolve(modules, scope, segs, seen=0):
    """The module (path tuple) that `segs`, named from `scope`, lands in; None when outside the crate."""
    if not segs or seen > 8:
        return None
    first, rest = segs[0], list(segs[1:])
    if first == "crate":
        cur = ()
    elif first == "self":
        cur = scope
    elif first == "super":
        cur = scope[:-1]
        while rest and rest[0] == "super":
            cur, rest = cur[:-1], rest[1:]
    elif scope in modules and first in modules[scope].children:
        cur = modules[scope].children[first]
    elif scope in modules and first in modules[scope].uses:
        use_scope, use_segs = modules[scope].uses[first]
        return resolve(modules, use_scope, use_segs + rest, seen + 1) if use_segs != [first] else None
    else:
        return None
    for seg in rest:
        mod = modules.get(cur)
        if mod is None:
            break
        if seg in mod.children:
            cur = mod.children[seg]
        elif seg in mod.uses:
            use_scope, use_segs = mod.uses[seg]
            target = resolve(modules, use_scope, use_segs, seen + 1)
            return target if target is not None else cur
        else:
            break
    return cur


def file_module(modules, path):
    """The nearest module of `path` that has a file of its own (inline modules belong to their file)."""
    while path and modules[path].file == modules[path[:-1]].file:
        path = path[:-1]
    return path


def sccs(nodes, edges):
    """The strongly connected components of the graph (Tarjan), each sorted."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def cycles_of(crate_dir, verbose):
    """Prints the module cycles of the crate in `crate_dir` and answers how many there are."""
    found = 0
    for root, modules, refs in load_crate(crate_dir):
        edges = {}  # parent -> {a: {b: [places]}}
        for scope, segs, line, file in refs:
            target = resolve(modules, scope, segs)
            if target is None:
                continue
            a, b = file_module(modules, scope), target
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k == len(a) or k == len(b):
                continue  # a module and one of its ancestors or descendants
            parent = a[:k]
            place = f"{rel(file)}:{line}"
            places = edges.setdefault(parent, {}).setdefault(a[k], {}).setdefault(b[k], [])
            if place not in places:
                places.append(place)
        for parent, graph in sorted(edges.items()):
            nodes = set(graph) | {b for targets in graph.values() for b in targets}
            for comp in sccs(nodes, {a: set(t) for a, t in graph.items()}):
                if len(comp) < 2:
                    continue
                found += 1
                where = "::".join(("crate",) + parent)
                print(f"{rel(crate_dir)} ({root.name}): cycle under {where}: {' ↔ '.join(comp)}")
                for a in comp:
                    for b in comp:
                        places = graph.get(a, {}).get(b)
                        if places:
                            shown = places if verbose else places[:3]
                            more = f" (+{len(places) - len(shown)} more)" if len(shown) < len(places) else ""
                            print(f"    {a} -> {b}: {', '.join(shown)}{more}")
    return found


def workspace_members():
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    block = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    return [ROOT / m for m in re.findall(r'"([^"]+)"', block.group(1))] if block else []


def main(argv):
    verbose = "-v" in argv
    dirs = [Path(a).resolve() for a in argv if a != "-v"] or workspace_members()
    total = sum(cycles_of(d, verbose) for d in dirs)
    if total == 0:
        print(f"no module cycles in {len(dirs)} crate(s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
