"""Make what a bare GPU machine needs to run ``benchmarks/gpu_check.py``, beside the checkout, and print the command.

    python benchmarks/gpu_carry.py [--spacy] [--python-version 3.12]

A GPU machine with a CUDA torch, numpy, h5py, scikit-learn, pytest and hypothesis but no package index (such as
one with torch 2.11 + CUDA 13 and Python 3.12 that takes 64 MiB of files) lacks a few of spacy-elmo's own needs and
AllenNLP 0.9.0's ELMo code. This downloads them here as wheels for that machine's Python (``.whl/``; overrides,
which has no wheel, is built), copies the peer's loader and the WikiText-2 test text (``.peer/``), with
``--spacy`` also packs spaCy and what it needs, without its tests and other languages' data (``.spacy.tar.xz``,
for the spaCy GPU tests), keeps all three out of git (``.git/info/exclude``), checks that the checkout and these
fit the machine's 64 MiB, and prints the command to run there. The versions are this environment's, so the GPU
runs what the tests here ran.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared"
LIMIT_BYTES = 64 * 2**20  # what the GPU machine takes: tracked files plus carried paths
WHEELS, PEER, SPACY = ".whl", ".peer", ".spacy.tar.xz"

# what the GPU machine's image lacks of spacy-elmo's needs, and AllenNLP 0.9.0's (the peer) with its own
PACKAGE_NEEDS = ("srsly", "catalogue", "platformdirs")
PEER_NEEDS = ("allennlp==0.9.0", "jsonpickle==4.1.4")
PEER_SDIST_ONLY = ("overrides==3.1.0",)
# spaCy and what it needs beyond the image (pydantic and typing-extensions at the versions spaCy was tested with)
SPACY_NEEDS = (
    "spacy",
    "spacy-legacy",
    "spacy-loggers",
    "thinc",
    "blis",
    "cymem",
    "preshed",
    "murmurhash",
    "wasabi",
    "weasel",
    "confection",
    "cloudpathlib",
    "smart-open",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")


def pinned(name: str) -> str:
    """``name==version`` as installed here (so the GPU machine runs the versions the tests here ran)."""
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"gpu_carry: {name} is not installed here; install the project first (pip install -e '.[test]')")


def pip(*args: str) -> None:
    """Run pip; its failure (no package index reachable, no such version) is one line, pip's last, not a traceback."""
    command = [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = said[-1][:300] if said else f"exit status {done.returncode}"
        sys.exit(f"gpu_carry: pip {args[0]} failed (is a package index reachable from here?): {reason}")


def binary_options(python_version: str) -> list[str]:
    """pip's options for wheels that the GPU machine's CPython and Linux can install."""
    options = ["--only-binary=:all:", "--no-deps", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        options += ["--platform", platform]
    return options


def download_wheels(folder: Path, python_version: str) -> None:
    """spacy-elmo's and the peer's missing needs, as wheels the machine installs with ``pip --no-index``.

    They are downloaded into a new folder beside ``folder``, which replaces it only once every wheel is there: a
    failed download (no package index reachable) leaves the wheels an earlier run downloaded as they were.
    """
    requirements = [pinned(name) for name in PACKAGE_NEEDS] + list(PEER_NEEDS)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f"{folder.name}.") as scratch:  # removed whatever ends
        new = Path(scratch) / "new"
        new.mkdir()
        pip("download", *binary_options(python_version), "--dest", str(new), *requirements)
        pip("wheel", "--no-deps", "--wheel-dir", str(new), *PEER_SDIST_ONLY)  # pure Python: any Python's wheel
        if folder.exists():
            folder.rename(Path(scratch) / "old")  # the earlier run's wheels, removed with the scratch folder
        new.rename(folder)


def copy_peer(folder: Path) -> None:
    """AllenNLP's loader and the sentences the speed runs read, from ``../shared``."""
    sources = [SHARED / "peers" / "allennlp_oracle.py", SHARED / "data" / "wikitext-2" / "test.txt"]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        sys.exit(f"gpu_carry: {', '.join(missing)} not found: run beside the project's shared/ folder")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for source in sources:
        shutil.copy2(source, folder / source.name)


def spacy_unneeded(path: Path) -> bool:
    """Files of the unpacked spaCy stack nothing imports: tests, Cython sources, caches (every language stays: spaCy's
    registry imports them all)."""
    parts = path.parts
    return "__pycache__" in parts or "tests" in parts or path.suffix in {".pyx", ".pxd", ".cpp", ".c", ".h"}


def pack_spacy(archive: Path, python_version: str) -> None:
    """spaCy's stack unpacked for the machine's Python, stripped and packed as one xz archive."""
    with tempfile.TemporaryDirectory() as scratch:
        wheels, site = Path(scratch) / "wheels", Path(scratch) / "site"
        pip("download", *binary_options(python_version), "--dest", str(wheels), *map(pinned, SPACY_NEEDS))
        wheel_files = map(str, wheels.iterdir())
        pip(
            "install",
            *binary_options(python_version),
            "--no-index",
            "--no-compile",
            "--target",
            str(site),
            *wheel_files,
        )
        strip = shutil.which("strip")
        if strip is None:
            sys.exit("gpu_carry: --spacy needs binutils' strip (apt-get install binutils): unstripped spaCy is too big")
        # the compiled modules' symbol tables are most of their size and nothing at run time
        subprocess.run([strip, "--strip-unneeded", *map(str, site.rglob("*.so"))], check=True)
        with tarfile.open(archive, "w:xz") as tar:
            for path in sorted(site.rglob("*")):
                relative = path.relative_to(site)
                if path.is_file() and not spacy_unneeded(relative):
                    tar.add(path, arcname=str(relative))


def exclude_from_git(names: list[str], root: Path = ROOT) -> None:
    """Keep the carried paths out of ``git status`` (they must not be committed): listed in the repository's
    ``info/exclude``, wherever git keeps it (a worktree's or submodule's ``.git`` is a file naming another folder)."""
    where = subprocess.run(
        ["git", "rev-parse", "--git-path", "info/exclude"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    exclude = root / where  # relative to root, or absolute (then the join gives it unchanged)
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    present = {line.strip().rstrip("/") for line in lines}
    wanted = [f"/{name}" for name in names if f"/{name}" not in present]
    if wanted:
        exclude.write_text("\n".join([*lines, *wanted]) + "\n")


def tracked_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / name.decode()).stat().st_size for name in files if name and (ROOT / name.decode()).is_file())


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_command(with_spacy: bool) -> str:
    """The one command the GPU machine runs, in the checkout's root."""
    unpack = f"tar -xJf {SPACY} -C /tmp/site && " if with_spacy else ""
    return (
        f"python3 -m pip install -q --no-index --no-deps --target /tmp/site {WHEELS}/*.whl && {unpack}"
        "export PYTHONPATH=/tmp/site:$PWD && PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py "
        f"--peer {PEER}/allennlp_oracle.py --text {PEER}/test.txt --out $OUT"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spacy", action="store_true", help="also pack spaCy (for the spaCy GPU tests)")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    args = parser.parse_args(argv)

    carried = [WHEELS, PEER] + ([SPACY] if args.spacy else [])
    exclude_from_git(carried)
    download_wheels(ROOT / WHEELS, args.python_version)
    copy_peer(ROOT / PEER)
    if args.spacy:
        pack_spacy(ROOT / SPACY, args.python_version)
    sizes = {name: size_of(ROOT / name) for name in carried}
    total = tracked_bytes() + sum(sizes.values())
    for name, size in sizes.items():
        print(f"{name}: {size / 2**20:.1f} MiB")
    print(f"tracked files and carried paths: {total / 2**20:.1f} MiB of {LIMIT_BYTES / 2**20:.0f} MiB")
    if total > LIMIT_BYTES:
        sys.exit("gpu_carry: over the GPU machine's limit: leave --spacy out")
    print(f"carry: {carried}")
    print(f"command: {run_command(args.spacy)}")


if __name__ == "__main__":
    main()
