"""Rewrite the `after` of every rule case whose translation changed: python tests/regen_rule_cases.py

Review `git diff rules/*/cases` before committing: each changed `after` is a changed claim.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from test_rule_cases import translated

RULES = Path(__file__).resolve().parents[1] / "rules"

for family in ("structure", "testing"):
    for path in sorted((RULES / family / "cases").glob("*.toml")):
        text = path.read_text()
        for case in tomllib.loads(text)["case"]:
            new = translated(case)
            if new != case["after"]:
                print(f"changed: {path.relative_to(RULES)} {case['name']}")
                at = text.index(f'name = "{case["name"]}"')  # this case's after, not an equal one
                old, fresh = "after = '''\n" + case["after"] + "'''", "after = '''\n" + new + "'''"
                at = text.index(old, at)
                text = text[:at] + fresh + text[at + len(old):]
        path.write_text(text)
