"""Export the text files of a (bare) git repository at one commit into a folder, for `spacy-elmo prepare-corpus`.

The corpora the bundled model is trained on live in public git repositories (Project Gutenberg books,
WikiExtractor dumps of Wikipedia). This copies the files of one commit, as they are (the layout
adapters of prepare-corpus strip their boilerplate), and writes ``source-info.json`` beside them:
repository, commit, paths and licence, which prepare-corpus records as the source's provenance and
the model card lists. Nothing is committed: the corpora are GBs.

    python training/export_git_corpus.py DATA/raw/gutenberg \\
        --git-dir MIRRORS/rcdm-uga+Gutenberg_Text/repo --repository github:rcdm-uga/Gutenberg_Text \\
        --include '*.txt' --licence 'public domain (Project Gutenberg texts)' --max-mb 200 --seed 0
    spacy-elmo prepare-corpus DATA/prep/gutenberg --source DATA/raw/gutenberg --format gutenberg

    python training/export_git_corpus.py DATA/raw/wiki --git-dir MIRRORS/jason-feng+wikiVisual/repo \\
        --commit 1c0fac92f29f17c1603bfffbe864e0dfdff66897 --under text --include 'wiki_*' \\
        --repository github:jason-feng/wikiVisual --licence 'CC BY-SA 3.0 (English Wikipedia, May 2015)'
    spacy-elmo prepare-corpus DATA/prep/wiki --source DATA/raw/wiki --format wikiextractor

DATA is a folder with room for the corpora, MIRRORS a folder of bare clones (``git clone --bare
https://github.com/OWNER/NAME MIRRORS/OWNER+NAME/repo``), as ``training/default-v2/corpus.sh`` takes them.

``--max-mb`` / ``--max-files`` take a slice: the files in path order, or in a seeded random order
with ``--seed`` (a sample across the whole repository, e.g. across all authors).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import random
import subprocess
from pathlib import Path, PurePosixPath


def git(git_dir: str, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True).stdout


def blobs(git_dir: str, commit: str, under: list[str], include: list[str]) -> list[tuple[str, str, int]]:
    """(path, blob id, size) of each readable file at ``commit`` under ``under`` whose name matches ``include``."""
    listing = git(git_dir, "ls-tree", "-r", "-l", "-z", commit, "--", *under).decode("utf-8")
    found = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _mode, kind, blob, size = meta.split()
        if kind != "blob" or not any(fnmatch.fnmatch(PurePosixPath(path).name, p) for p in include):
            continue
        if not size.isdigit():  # git cannot read the blob: absent from this copy (a partial mirror)
            print(f"skipped {path}: its blob {blob} is not in {git_dir}")
            continue
        found.append((path, blob, int(size)))
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="Folder for the files (their repository paths are kept)")
    parser.add_argument("--git-dir", required=True, help="The repository (a bare mirror is fine)")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--under", action="append", default=[], help="Only files under this path; repeatable")
    parser.add_argument("--include", action="append", default=[], help="File name pattern, e.g. '*.txt'; repeatable")
    parser.add_argument("--repository", required=True, help="How to name the repository, e.g. github:owner/name")
    parser.add_argument("--licence", required=True, help="The texts' licence, recorded in source-info.json")
    parser.add_argument("--max-files", type=int, default=None)
    parser.add_argument("--max-mb", type=float, default=None, help="Stop before exceeding this many MB")
    parser.add_argument("--seed", type=int, default=None, help="Take the files in a seeded random order")
    args = parser.parse_args()

    commit = git(args.git_dir, "rev-parse", args.commit).decode().strip()
    files = blobs(args.git_dir, commit, args.under, args.include or ["*"])
    if args.seed is not None:
        random.Random(args.seed).shuffle(files)
    chosen, total = [], 0
    for path, blob, size in files:
        if args.max_files is not None and len(chosen) >= args.max_files:
            break
        if args.max_mb is not None and total + size > args.max_mb * 1e6:
            break
        chosen.append((path, blob))
        total += size
    for path, blob in chosen:
        target = args.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(git(args.git_dir, "cat-file", "blob", blob))
    info = {
        "repository": args.repository,
        "commit": commit,
        "path": ", ".join(args.under) or "/",
        "licence": args.licence,
        "files": len(chosen),
        "of_files": len(files),
        "bytes": total,
    }
    (args.out / "source-info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(f"exported {len(chosen)} of {len(files)} files ({total / 1e6:.1f} MB) of {args.repository}@{commit[:12]}")


if __name__ == "__main__":
    main()
