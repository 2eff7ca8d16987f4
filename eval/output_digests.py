"""Every engine result, digested per file, to show a change to the engine left outputs as they were.

Usage:
    python eval/output_digests.py --save before.json     # on the commit before the change
    python eval/output_digests.py --compare before.json  # after it: the files whose result differs

The goldens (``fixtures/expected``) cover the fixtures' output text; this covers more of the
result and more code: per file, its status, output bytes, TODOs, edits, notes, diff, support
names, allowed TF uses and error, for every fixture source and **every** ``.py`` file of the
installed Keras (about 1,000 files, 1-2 minutes), each translated with its package's pre-pass
(``eval/bench_migrate.py``'s corpora). A speed-up that changes any of these is not a
speed-up. Exit status: 0 when nothing differs (or on ``--save``), 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_migrate  # noqa: E402
from tern.engine.runner import translate_file  # noqa: E402


def digests(keras_files: int = 10**6) -> dict[str, str]:
    out: dict[str, str] = {}
    corpora = [bench_migrate.fixtures_corpus(), bench_migrate.keras_corpus(keras_files)]
    for corpus in (c for c in corpora if c is not None):
        jobs, _ = bench_migrate.engine_jobs(corpus)
        for job in jobs:
            result, data = translate_file(job)
            whole = (result.status, data, result.todos, result.edits, result.notes, result.diff, result.support,
                     result.allowed, result.error)
            out[f"{corpus.name}/{job.rel}"] = hashlib.sha256(repr(whole).encode()).hexdigest()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--save", type=Path, help="write the digests to this file")
    action.add_argument("--compare", type=Path, help="compare with digests saved before")
    parser.add_argument("--keras-files", type=int, default=10**6, help="at most this many Keras files (default: all)")
    args = parser.parse_args(argv)
    now = digests(args.keras_files)
    if args.save:
        args.save.write_text(json.dumps(now, indent=0, sort_keys=True) + "\n")
        print(f"{len(now)} files digested into {args.save}")
        return 0
    before = json.loads(args.compare.read_text())
    differ = sorted(k for k in now.keys() & before.keys() if now[k] != before[k])
    only_now, only_before = sorted(now.keys() - before.keys()), sorted(before.keys() - now.keys())
    for label, names in (("differ", differ), ("new", only_now), ("gone", only_before)):
        for name in names[:20]:
            print(f"{label}: {name}")
        if len(names) > 20:
            print(f"{label}: ... {len(names) - 20} more")
    print(f"{len(now)} files: {len(differ)} differ, {len(only_now)} new, {len(only_before)} gone")
    return 1 if differ or only_now or only_before else 0


if __name__ == "__main__":
    sys.exit(main())
