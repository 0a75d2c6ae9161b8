"""Progress of long work, the one helper the long loops of the front ends use (the spaCy component's
``initialize``, ``pipe`` and a long doc's windows; ``ElmoVectorizer.transform``): a tqdm bar on stderr.

Work of a few seconds shows nothing. Longer work shows a bar once it has run ``DELAY_S`` seconds, and only where
stderr is a terminal (tqdm's ``disable=None``): not in tests, logs or pipes, unless a caller asks for it
(``show=True``, an ``ElmoVectorizer`` with ``verbose=1``). Its rate and ETA count from the end of the first batch:
the first batch also pays for loading and warming the model, and a bar timed from the start would promise hours.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from types import TracebackType
from typing import Any, Optional, TextIO

from tqdm import tqdm

DELAY_S = 3.0  # work that ends sooner shows no bar


class Progress:
    """A tqdm bar made at the first completed batch (its clock starts there), shown after ``DELAY_S`` seconds of work.

    total (int | None): the units of work, when known (None: a count and a rate, no ETA).
    unit (str): what one unit is ("token", "text").
    desc (str): the bar's label.
    show (bool | None): None (the default) shows the bar only on a terminal and only for long work;
        True always, from the first batch on (a caller's explicit ask, such as scikit-learn's ``verbose``);
        False never. A child process (``nlp.pipe(n_process=...)``'s workers) shows none unless asked.
    file (TextIO | None): where the bar goes (None: ``sys.stderr`` when the work starts).

    Use it as a context manager, calling :meth:`update` with the units each batch completes.
    """

    def __init__(
        self,
        total: Optional[int] = None,
        *,
        unit: str = "it",
        desc: str = "elmo",
        show: Optional[bool] = None,
        file: Optional[TextIO] = None,
    ) -> None:
        self.total = total
        self.unit = unit
        self.desc = desc
        # a child process (nlp.pipe(n_process=...)) shows no bar of its own: one per process would garble the terminal
        self.show = False if show is None and multiprocessing.parent_process() is not None else show
        self.file = sys.stderr if file is None else file
        self.bar: Optional[Any] = None  # the tqdm bar, once the first batch is done
        self._started = time.monotonic()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done; the first non-empty batch makes the bar, the ones after it move it."""
        if self.show is False or n <= 0:
            return
        if self.bar is not None:
            self.bar.update(n)
            return
        delay = 0.0 if self.show else max(0.0, DELAY_S - (time.monotonic() - self._started))
        self.bar = tqdm(
            total=self.total,
            initial=n,  # done before the bar's clock starts: left out of its rate and ETA
            unit=self.unit,
            desc=self.desc,
            file=self.file,
            delay=delay,
            disable=None if self.show is None else False,  # None: on a terminal only
            leave=self.show is not None,  # an automatic bar leaves no line behind; one asked for stays
            dynamic_ncols=True,
        )

    def close(self) -> None:
        """Close the bar (a bar never shown prints nothing)."""
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: Optional[type[BaseException]],
        value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()


def show_of(verbose: Any) -> Optional[bool]:
    """What a scikit-learn style ``verbose`` asks of :class:`Progress`: None (the default) a bar on a terminal for
    long work; 0 or False none; 1 (or True, or more) a bar whatever stderr is."""
    if verbose is None:
        return None
    return bool(verbose)
