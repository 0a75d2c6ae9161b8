"""AllenNLP 0.9's ``allennlp elmo`` command: ``[elmo] INPUT OUTPUT (--all | --top | --average) [...]``.

Reachable as ``python -m spacy_elmo.compat.allennlp ...``, ``spacy-elmo allennlp-elmo ...`` and
:func:`main`, which also takes AllenNLP's ``sys.argv = [prog, "elmo", INPUT, OUTPUT, ...]`` (what
``allennlp.commands.main`` reads) as well as the short form without the subcommand word.
The same arguments, defaults (the published "original" model, batches of 64) and HDF5 layout as
AllenNLP (see :meth:`.embedder.ElmoEmbedder.embed_file`); its errors too (a blank line raises
:class:`~.util.ConfigurationError`). ``--vocab-path`` and ``--file-friendly-logging`` are
accepted and do nothing, as in AllenNLP 0.9 (which also wrote ``stdout.log`` / ``stderr.log``
beside the output; this does not). ``--include-package`` imports the named module, as there.
``--stateless`` (not in AllenNLP) gives this package's batch-invariant vectors.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from typing import Optional

import torch

from ...sources.download import HOME_ENV, OFFLINE_ENV, DownloadError, is_offline
from .embedder import DEFAULT_BATCH_SIZE, DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE, ElmoEmbedder, check_cuda_device

SUBCOMMAND = "elmo"  # AllenNLP's name of this command: ``allennlp elmo`` / ``main()`` with ``sys.argv[1] == "elmo"``


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``elmo`` subcommand's parser, argument for argument."""
    parser = argparse.ArgumentParser(prog=prog or "allennlp elmo", description="Create word vectors using ELMo.")
    # AllenNLP's own ``main`` (``from allennlp.commands import main``) reads its subcommand first:
    # ``sys.argv = [prog, "elmo", INPUT, OUTPUT, ...]``. The word is taken when three positional
    # arguments are given, so an input file named "elmo" still works in the short form.
    parser.add_argument("subcommand", nargs="?", choices=[SUBCOMMAND], help=argparse.SUPPRESS)
    parser.add_argument("input_file", type=argparse.FileType("r", encoding="utf-8"), help="The path to the input file.")
    parser.add_argument("output_file", type=str, help="The path to the output file.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--all", action="store_true", help="Output all three ELMo vectors.")
    group.add_argument("--top", action="store_true", help="Output the top ELMo vector.")
    group.add_argument("--average", action="store_true", help="Output the average of the ELMo vectors.")
    parser.add_argument(
        "--vocab-path", type=str, help="A path to a vocabulary file to generate (unused, as in AllenNLP 0.9)."
    )
    parser.add_argument(
        "--options-file", type=str, default=DEFAULT_OPTIONS_FILE, help="The path to the ELMo options file."
    )
    parser.add_argument(
        "--weight-file", type=str, default=DEFAULT_WEIGHT_FILE, help="The path to the ELMo weight file."
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="The batch size to use.")
    parser.add_argument("--file-friendly-logging", default=False, action="store_true", help="Accepted; no effect here.")
    parser.add_argument("--cuda-device", type=int, default=-1, help="The cuda_device to run on.")
    parser.add_argument(
        "--forget-sentences",
        action="store_true",
        help="Unless --use-sentence-keys, leave out the sentence_to_index dataset (sentence -> line number key).",
    )
    parser.add_argument(
        "--use-sentence-keys",
        action="store_true",
        help="Use each sentence itself, not its line number, as its HDF5 key.",
    )
    parser.add_argument(
        "--include-package", type=str, action="append", default=[], help="additional packages to include"
    )
    parser.add_argument(
        "--stateless",
        action="store_true",
        help="Start every batch from a zero LSTM state (not in AllenNLP): vectors independent of batching and order.",
    )
    return parser


def main(prog: Optional[str] = None, argv: Optional[list[str]] = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``) and write the HDF5 file; returns on success (argparse exits on bad
    usage).

    ``argv`` is ``INPUT OUTPUT (--all | --top | --average) ...``, optionally after AllenNLP's
    subcommand word, ``elmo ...``, as ``allennlp.commands.main`` reads ``sys.argv``.
    """
    parser = build_parser(prog)
    args = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    try:
        check_cuda_device(args.cuda_device)
    except ValueError as err:  # a bad argument, as argparse says one: one line and exit 2, before the model is read
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    for package in args.include_package:
        importlib.import_module(package)
    output_format = "all" if args.all else "top" if args.top else "average"
    try:
        embedder = ElmoEmbedder(args.options_file, args.weight_file, args.cuda_device, stateful=not args.stateless)
    except DownloadError as err:
        if {args.options_file, args.weight_file}.isdisjoint({DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE}):
            raise
        raise DownloadError(default_model_unavailable(err)) from err
    with torch.no_grad():
        embedder.embed_file(
            args.input_file,
            args.output_file,
            output_format,
            args.batch_size,
            args.forget_sentences,
            args.use_sentence_keys,
        )


def default_model_unavailable(err: DownloadError) -> str:
    """One complete line for when AllenNLP's default model (the published ``original``) can be neither read from the
    cache nor downloaded: why, in a few words, and the ways out (a local model, or a download where there is a network).
    """
    network = re.search(r"failed: (could not connect|the transfer was cut off) (?:to \S+ )?\(", str(err))
    if is_offline():
        reason = f"{OFFLINE_ENV}=1"
    elif network:  # the fetcher's text goes on with the host and its advice, or the network library's long
        # description, clipped: not kept
        reason = f"{network.group(1)}; {OFFLINE_ENV}=1 never tries"
    else:  # a checksum, a full disk...: the fetcher's own line says which
        reason = str(err)
    return (
        f"the default model (AllenNLP's 'original', used without --options-file/--weight-file) is not in the cache "
        f"and could not be downloaded ({reason}): pass a local model with --options-file FILE --weight-file FILE, "
        f"or run `spacy-elmo download original` where there is a network (same {HOME_ENV})"
    )
