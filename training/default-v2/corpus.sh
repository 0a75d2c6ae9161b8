#!/usr/bin/env bash
# The training corpus of the bundled model "default" v2: three public git repositories, exported at fixed
# commits and prepared once. Nothing here is committed: the corpora are GBs (156.2M words prepared: Gutenberg
# 49.5M, English Wikipedia 77.4M, Simple English Wikipedia 29.3M).
#
#   bash training/default-v2/corpus.sh DATA MIRRORS
#
# DATA: a folder with room for ~2 GB; MIRRORS: bare clones of the three repositories, as
# MIRRORS/rcdm-uga+Gutenberg_Text/repo, MIRRORS/jason-feng+wikiVisual/repo and
# MIRRORS/taminemelissa+quiz-generator/repo (e.g. `git clone --bare https://github.com/OWNER/NAME`).
# The same commits, seed and spaCy tokenizer give the same shards, so `spacy-elmo train --continue-corpus`
# can carry on from a stage trained on another machine (a different corpus is refused by name).
set -euo pipefail
DATA=${1:?DATA folder}
MIRRORS=${2:?folder of the bare mirrors}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export_corpus() { python "$HERE/training/export_git_corpus.py" "$@"; }

export_corpus "$DATA/raw/gutenberg" --git-dir "$MIRRORS/rcdm-uga+Gutenberg_Text/repo" \
    --commit a0b16d35a9851168ce9ac649851c17b7ab08d48e --repository github:rcdm-uga/Gutenberg_Text --include '*.txt' \
    --licence 'public domain (Project Gutenberg texts)' --max-mb 250 --seed 0
export_corpus "$DATA/raw/wiki" --git-dir "$MIRRORS/jason-feng+wikiVisual/repo" \
    --commit 1c0fac92f29f17c1603bfffbe864e0dfdff66897 --under text --include 'wiki_*' \
    --repository github:jason-feng/wikiVisual --licence 'CC BY-SA 3.0 (English Wikipedia, May 2015)'
export_corpus "$DATA/raw/simplewiki" --git-dir "$MIRRORS/taminemelissa+quiz-generator/repo" \
    --commit d21d03334ce88c194f8b55317bf8091e7b836f83 --under data/wikipedia --include 'wiki_*' \
    --repository github:taminemelissa/quiz-generator --licence 'CC BY-SA (Simple English Wikipedia)'

# one process per source (each one streaming pass; they run side by side on a multi-core machine)
spacy-elmo prepare-corpus "$DATA/prep/gutenberg" --source "$DATA/raw/gutenberg" --format gutenberg --no-progress &
spacy-elmo prepare-corpus "$DATA/prep/wiki" --source "$DATA/raw/wiki" --format wikiextractor --no-progress &
spacy-elmo prepare-corpus "$DATA/prep/simplewiki" --source "$DATA/raw/simplewiki" --format jsonl --no-progress &
wait
