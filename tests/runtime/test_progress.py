"""The progress helper: a bar for long work on a terminal only, timed from the end of the first batch."""

import io
import types

import pytest
import tqdm.std

from spacy_elmo.runtime.features import progress
from spacy_elmo.runtime.features.progress import Progress, show_of


class Terminal(io.StringIO):
    """What a terminal's stderr says of itself."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """A fake clock for tqdm and the helper alike: ``clock.now`` is the time."""
    fake = types.SimpleNamespace(now=1000.0)
    monkeypatch.setattr(tqdm.std, "time", lambda: fake.now)
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: fake.now))
    return fake


def shown(clock, out, seconds_per_batch: float) -> str:
    """What a Progress over 40 docs writes to ``out`` when its four batches of 10 take ``seconds_per_batch`` each."""
    with Progress(40, unit="doc", file=out) as bar:
        for _ in range(4):
            clock.now += seconds_per_batch
            bar.update(10)
    return out.getvalue()


def test_long_work_on_a_terminal_shows_a_bar(clock):
    said = shown(clock, Terminal(), 2.0)  # eight seconds in all: past the delay
    assert "40/40" in said and "doc/s" in said


def test_short_work_shows_nothing(clock):
    assert shown(clock, Terminal(), 0.1) == ""


def test_long_work_off_a_terminal_shows_nothing(clock):
    assert shown(clock, io.StringIO(), 5.0) == ""  # a log file, a pipe, a test's captured stderr


def test_asked_for_it_shows_everywhere_and_false_never(clock):
    out, never = io.StringIO(), Terminal()
    with Progress(2, file=out, show=True) as bar, Progress(2, file=never, show=False) as quiet:
        for _ in range(2):
            clock.now += 5.0
            bar.update(1)
            quiet.update(1)
    assert "2/2" in out.getvalue() and never.getvalue() == ""
    assert [show_of(v) for v in (None, 0, False, 1, True, 2)] == [None, False, False, True, True, True]


def test_the_rate_and_eta_count_from_the_end_of_the_first_batch(clock):
    """The first batch pays for loading and warming the model: timed from the start, the ETA is far too long."""
    out = Terminal()
    with Progress(100, unit="doc", file=out) as bar:
        clock.now += 30.0  # the first batch, with its start-up
        bar.update(10)
        assert bar.bar is not None and bar.bar.start_t == clock.now  # the bar's clock starts after it
        clock.now += 1.0
        bar.update(10)  # ten docs a second from here on
        said = bar.bar.format_dict
        assert said["elapsed"] == pytest.approx(1.0) and said["rate"] == pytest.approx(10.0)
        assert "<00:08" in str(bar.bar)  # 80 docs left at ten a second (timed from the start: over two minutes)
