#!/usr/bin/env python3
"""Reports cycles among the modules of src/, read from their `crate::` and
`super::` paths (outside comments and `#[cfg(test)]` items).

Two graphs are checked: one node per file (`slot::gate`, `policy::aimd`), and
one node per top-level module (`slot`, `policy`): a folder is one room, so an
arrow into it and one out of it make a cycle too. Exits 1 on any cycle.

    python3 .ci/module_cycles.py [--edges] [SRC_DIR]
"""

import os
import re
import sys


def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif text.startswith('r"', i) or text.startswith('r#"', i):
            hashes = 0 if text[i + 1] == '"' else 1
            end = '"' + "#" * hashes
            j = text.find(end, i + 2 + hashes)
            out.append('""')
            i = n if j < 0 else j + len(end)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def strip_cfg_test(text):
    """Drops every item that follows `#[cfg(test)]` (a module or a function)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", text)
        if not m:
            return text
        i = m.end()
        # The item ends at its matching closing brace, or at `;`.
        while i < len(text) and text[i] not in "{;":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            while i < len(text):
                if text[i] == "{":
                    depth += 1
                elif text[i] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
        text = text[: m.start()] + text[i + 1 :]


def expand(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = tree.strip()
    m = re.match(r"^([\w:]*?)::\{(.*)\}$", tree, re.S)
    if not m:
        return [tree]
    prefix, body = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        for sub in expand(part):
            out.append(prefix + "::" + sub if prefix else sub)
    return out


def paths(text):
    found = []
    for m in re.finditer(r"\b(crate|super)::", text):
        i = m.end()
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            for p in expand("x::" + text[i : j + 1]):
                found.append((m.group(1), p[3:]))
        else:
            p = re.match(r"[\w:]+", text[i:])
            if p:
                found.append((m.group(1), p.group(0)))
    return found


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return "::".join(rel)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_edges = "--edges" in sys.argv
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(src, path)] = path
    modules = set(files)

    def resolve(segments):
        # The longest prefix that is a module of ours.
        for k in range(len(segments), 0, -1):
            cand = "::".join(segments[:k])
            if cand in modules:
                return cand
        return ""

    edges = {m: set() for m in modules}
    for mod, path in files.items():
        with open(path, encoding="utf-8") as f:
            text = strip_cfg_test(strip_comments(f.read()))
        here = mod.split("::") if mod else []
        for kind, p in paths(text):
            segments = [s for s in p.split("::") if s and s != "self"]
            if kind == "super":
                # `super` is the parent of the module the file defines.
                base = here[:-1]
                while segments and segments[0] == "super":
                    segments, base = segments[1:], base[:-1]
                segments = base + segments
            target = resolve(segments)
            if target and target != mod:
                edges[mod].add(target)

    def top(m):
        return m.split("::")[0] if m else "lib"

    top_edges = {}
    for a, targets in edges.items():
        for b in targets:
            ta, tb = top(a), top(b)
            if ta != tb and ta != "lib" and tb != "lib":
                top_edges.setdefault(ta, set()).add(tb)
            top_edges.setdefault(ta, set())

    def cycles(graph):
        # Tarjan's strongly connected components.
        index, low, stack, on, out = {}, {}, [], set(), []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(graph.get(v, ())):
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

        sys.setrecursionlimit(10000)
        for v in sorted(graph):
            if v not in index:
                visit(v)
        return out

    n_edges = sum(len(t) for t in edges.values())
    print(f"{len(modules)} modules, {n_edges} edges between them")
    if show_edges:
        for a in sorted(edges):
            if edges[a]:
                print(f"  {a or 'lib'} -> {', '.join(sorted(edges[a]))}")
    bad = False
    for name, graph in (("file", edges), ("top-level module", top_edges)):
        found = cycles(graph)
        for comp in found:
            bad = True
            print(f"cycle among {name}s: {' <-> '.join(c or 'lib' for c in comp)}")
        if not found:
            print(f"no cycle among {name}s")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
