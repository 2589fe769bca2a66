#!/usr/bin/env python3
"""Applies a mutation script's exact-text patch: replaces OLD with NEW in
FILE, which must hold OLD exactly once (else the source changed and the
patch needs updating: exit status 1, saying so).

Usage: python3 .ci/replace-once.py FILE OLD NEW
"""
import sys

path, old, new = sys.argv[1:]
text = open(path, encoding="utf-8").read()
if text.count(old) != 1:
    sys.exit(f"{path}: the text to replace occurs {text.count(old)} times, not once: {old!r}")
open(path, "w", encoding="utf-8").write(text.replace(old, new))
