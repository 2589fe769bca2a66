#!/usr/bin/env python3
"""Checks that Cargo.toml's rust-version covers the locked dependencies.

Reads `cargo metadata` (all features, the lock file as it is) and walks the
graph from this crate: its library dependencies (normal and build, with
every feature on) and those of its tests, examples and benchmarks must
each declare a rust-version at or below ours, so that both a user of the
crate and `cargo test` on that toolchain build.
"""
import json
import subprocess
import sys


def version(text):
    return tuple(int(part) for part in text.split(".")[:3]) + (0,) * (3 - len(text.split(".")[:3]))


def main():
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = metadata["resolve"]["root"]
    ours = packages[root].get("rust_version")
    if not ours:
        print("Cargo.toml declares no rust-version", file=sys.stderr)
        return 1

    def walk(start_kinds):
        seen = set()
        stack = []
        for dep in nodes[root]["deps"]:
            if any(k["kind"] in start_kinds for k in dep["dep_kinds"]):
                stack.append(dep["pkg"])
        while stack:
            pkg = stack.pop()
            if pkg in seen:
                continue
            seen.add(pkg)
            for dep in nodes[pkg]["deps"]:
                if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                    stack.append(dep["pkg"])
        return seen

    library = walk((None, "build"))
    everything = walk((None, "build", "dev"))

    def needs(ids):
        found = [
            (version(packages[i]["rust_version"]), packages[i]["name"], packages[i]["version"], packages[i]["rust_version"])
            for i in ids
            if packages[i].get("rust_version")
        ]
        return sorted(found, reverse=True)

    too_new = [n for n in needs(everything) if n[0] > version(ours)]
    if too_new:
        for _, name, ver, rv in too_new:
            kind = "library" if any(
                packages[i]["name"] == name and packages[i]["version"] == ver for i in library
            ) else "dev"
            print(f"error: {name} {ver} ({kind} dependency) needs Rust {rv}, above rust-version {ours}", file=sys.stderr)
        return 1
    top = needs(library)[0] if needs(library) else None
    print(
        f"rust-version {ours} covers the {len(library)} locked library dependencies"
        + (f" (the most demanding: {top[1]} {top[2]}, Rust {top[3]})" if top else "")
        + f" and the {len(everything - library)} more of tests, examples and benchmarks"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
