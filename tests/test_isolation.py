"""The test suite keeps off the user's files: the package's home is a temporary folder while tests run, and a test
that writes under the real one fails (tests/conftest.py)."""

from pathlib import Path

import spacy_elmo
from spacy_elmo.sources.download import home
from tests.conftest import FIXTURE_DIR, REAL_HOME, SUITE_USER_CACHE, files_under, writes_between


def test_the_package_home_is_a_temporary_folder(temporary_home, tmp_path_factory):
    assert home() == temporary_home != REAL_HOME
    assert temporary_home.is_relative_to(tmp_path_factory.getbasetemp())


def test_the_watched_home_is_the_suites_own_user_cache():
    """Another process writing the user's real cache while the tests run (a guide tried meanwhile) fails no test: the
    guard watches the user cache the suite itself was given, where nothing but the suite writes."""
    import platformdirs

    assert REAL_HOME.is_relative_to(SUITE_USER_CACHE)
    assert Path(platformdirs.user_cache_dir("spacy-elmo", appauthor=False)) == REAL_HOME


def test_an_unpacked_archive_lands_in_the_temporary_home(tmp_path, temporary_home):
    import shutil

    archive = shutil.make_archive(str(tmp_path / "model"), "zip", FIXTURE_DIR.parent / "elmoformanylangs", "char_only")
    before = files_under(temporary_home)
    spacy_elmo.load_bilm(archive)
    unpacked = [p for p in writes_between(before, files_under(temporary_home)) if Path(p).parts[0] == "archives"]
    assert unpacked, "the archive was not unpacked under the temporary home"


def test_a_write_is_seen_and_named(tmp_path):
    (tmp_path / "kept.txt").write_text("a")
    (tmp_path / "changed.txt").write_text("a")
    before = files_under(tmp_path)
    (tmp_path / "changed.txt").write_text("bb")
    (tmp_path / "archives" / "x").mkdir(parents=True)
    (tmp_path / "archives" / "x" / "new.bin").write_bytes(b"1")
    expected = ["archives", str(Path("archives/x")), str(Path("archives/x/new.bin")), "changed.txt"]
    assert writes_between(before, files_under(tmp_path)) == expected
    assert files_under(tmp_path / "absent") == {}
