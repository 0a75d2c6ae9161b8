"""The published ELMo models, by name: where each one's files are, and what it is.

URLs as listed on AllenNLP's ELMo page (allenai/allennlp-website ``elmo.html``: the four English
models and the contributed ones), which is also where AllenNLP 0.9's own ``elmo`` command takes
its default (``original``). Sizes are approximate (4 bytes per parameter); no publisher states
checksums, so each file's sha256 is recorded on first download and a later mismatch is refused.

ELMoForManyLangs' 44 language models (``manylangs-<code>``), one zip each in its own directory
format, as listed in the README of HIT-SCIR/ELMoForManyLangs (the publisher's repository), which
hosts them in the NLPL vectors repository; all share one architecture (its README: the
hyperparameters of Peters et al. 2018, with a word embedding beside the char CNN), trained on 20
million words of the CoNLL 2018 shared task's raw text (Wikipedia + Common Crawl) per language.
No licence is stated with the models (the repository's code is under MIT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

_S3 = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"


@dataclass(frozen=True)
class PublishedModel:
    """One published biLM: its two files, architecture, size and provenance."""

    name: str
    options_url: Optional[str]  # None for a model published as one archive (archive_url)
    weights_url: Optional[str]
    architecture: str  # LSTM cells x projection, CNN filters, highway layers
    parameters_m: Optional[float]  # millions of biLM parameters (None: not stated by the publisher)
    approx_mb: Optional[int]  # size of the weights file, approximately (None: not known)
    trained_on: str
    source: str  # who made it
    options_sha256: Optional[str] = None
    weights_sha256: Optional[str] = None
    archive_url: Optional[str] = None  # a .zip / .tar.gz holding the model's folder, instead of two files
    language: str = "English"
    licence: str = "not stated"
    contributed: bool = False  # listed on AllenNLP's page, made by someone else (``source``)

    @property
    def publisher(self) -> str:
        """Who published it, in words: ``"AllenNLP"``, ``"ExaWizards, contributed to AllenNLP's list"``."""
        return f"{self.source}, contributed to AllenNLP's list" if self.contributed else self.source

    @property
    def urls(self) -> tuple[str, ...]:
        """The files to fetch: the archive, or the options and weights files."""
        if self.archive_url is not None:
            return (self.archive_url,)
        return tuple(url for url in (self.options_url, self.weights_url) if url is not None)


def _allennlp(
    name: str, folder: str, parameters_m: float, approx_mb: int, architecture: str, trained_on: str
) -> PublishedModel:
    return PublishedModel(
        name=name,
        options_url=f"{_S3}/{folder}/elmo_{folder}_options.json",
        weights_url=f"{_S3}/{folder}/elmo_{folder}_weights.hdf5",
        architecture=architecture,
        parameters_m=parameters_m,
        approx_mb=approx_mb,
        trained_on=trained_on,
        source="AllenNLP",
    )


def _contributed(
    name: str, options_url: str, weights_url: str, trained_on: str, source: str, language: str
) -> PublishedModel:
    """A contributed model whose publisher states no architecture or size (its options.json says)."""
    return PublishedModel(
        name=name,
        options_url=options_url,
        weights_url=weights_url,
        architecture="not stated (see its options.json)",
        parameters_m=None,
        approx_mb=None,
        trained_on=trained_on,
        source=source,
        language=language,
        contributed=True,
    )


_1B_WORDS = "1B Word Benchmark (WMT 2011 news, 800M tokens)"

PUBLISHED: dict[str, PublishedModel] = {
    model.name: model
    for model in (
        _allennlp(
            "small",
            "2x1024_128_2048cnn_1xhighway",
            13.6,
            55,
            "2 x 1024 cells / 128 proj, 2048 filters, 1 highway",
            _1B_WORDS,
        ),
        _allennlp(
            "medium",
            "2x2048_256_2048cnn_1xhighway",
            28.0,
            112,
            "2 x 2048 cells / 256 proj, 2048 filters, 1 highway",
            _1B_WORDS,
        ),
        _allennlp(
            "original",
            "2x4096_512_2048cnn_2xhighway",
            93.6,
            375,
            "2 x 4096 cells / 512 proj, 2048 filters, 2 highway",
            _1B_WORDS,
        ),
        _allennlp(
            "original-5.5B",
            "2x4096_512_2048cnn_2xhighway_5.5B",
            93.6,
            375,
            "2 x 4096 cells / 512 proj, 2048 filters, 2 highway",
            "Wikipedia + WMT 2008-12 news (5.5B tokens)",
        ),
        PublishedModel(
            name="pubmed",
            options_url=f"{_S3}/contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_options.json",
            weights_url=f"{_S3}/contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
            architecture="2 x 4096 cells / 512 proj, 2048 filters, 2 highway",
            parameters_m=93.6,
            approx_mb=375,
            trained_on="PubMed (biomedical abstracts)",
            source="Matthew Peters",
            contributed=True,
        ),
        _contributed(
            "pt-wikipedia",
            f"{_S3}/contributed/pt/wikipedia/options.json",
            f"{_S3}/contributed/pt/wikipedia/elmo_pt_weights.hdf5",
            "Portuguese Wikipedia",
            "UFG (Brazil)",
            "Portuguese",
        ),
        _contributed(
            "pt-brwac",
            f"{_S3}/contributed/pt/brwac/options.json",
            f"{_S3}/contributed/pt/brwac/elmo_pt_weights_dgx1.hdf5",
            "Portuguese brWaC web corpus",
            "UFG (Brazil)",
            "Portuguese",
        ),
        _contributed(
            "ja",
            "https://exawizardsallenlp.blob.core.windows.net/data/options.json",
            "https://exawizardsallenlp.blob.core.windows.net/data/weights.hdf5",
            "Japanese",
            "ExaWizards",
            "Japanese",
        ),
    )
}


# ELMoForManyLangs' languages: (ISO 639 code, language, NLPL repository 1.1 entry), from its README's table
_MANYLANGS = (
    ("ar", "Arabic", 136),
    ("bg", "Bulgarian", 137),
    ("ca", "Catalan", 138),
    ("cs", "Czech", 139),
    ("cu", "Old Church Slavonic", 140),
    ("da", "Danish", 141),
    ("de", "German", 142),
    ("el", "Greek", 143),
    ("en", "English", 144),
    ("es", "Spanish", 145),
    ("et", "Estonian", 146),
    ("eu", "Basque", 147),
    ("fa", "Persian", 148),
    ("fi", "Finnish", 149),
    ("fr", "French", 150),
    ("ga", "Irish", 151),
    ("gl", "Galician", 152),
    ("grc", "Ancient Greek", 153),
    ("he", "Hebrew", 154),
    ("hi", "Hindi", 155),
    ("hr", "Croatian", 156),
    ("hu", "Hungarian", 157),
    ("id", "Indonesian", 158),
    ("it", "Italian", 159),
    ("ja", "Japanese", 160),
    ("ko", "Korean", 161),
    ("la", "Latin", 162),
    ("lv", "Latvian", 163),
    ("nl", "Dutch", 164),
    ("nb", "Norwegian Bokmål", 165),
    ("nn", "Norwegian Nynorsk", 166),
    ("pl", "Polish", 167),
    ("pt", "Portuguese", 168),
    ("ro", "Romanian", 169),
    ("ru", "Russian", 170),
    ("sk", "Slovak", 171),
    ("sl", "Slovene", 172),
    ("sv", "Swedish", 173),
    ("tr", "Turkish", 174),
    ("ug", "Uyghur", 175),
    ("uk", "Ukrainian", 176),
    ("ur", "Urdu", 177),
    ("vi", "Vietnamese", 178),
    ("zh", "Chinese", 179),
)


def _manylangs(code: str, language: str, entry: int) -> PublishedModel:
    return PublishedModel(
        name=f"manylangs-{code}",
        options_url=None,
        weights_url=None,
        archive_url=f"http://vectors.nlpl.eu/repository/11/{entry}.zip",
        architecture="ELMoForManyLangs: word 100 + char CNN 2048 filters, 2 highway; 2 x 4096 cells / 512 proj",
        parameters_m=None,
        approx_mb=None,
        trained_on="20M words of CoNLL 2018 raw text (Wikipedia + Common Crawl)",
        source="ELMoForManyLangs (HIT-SCIR)",
        language=language,
        licence="not stated with the models (ELMoForManyLangs' code: MIT)",
    )


PUBLISHED.update((model.name, model) for model in (_manylangs(*row) for row in _MANYLANGS))


def published_model(name: str) -> Optional[PublishedModel]:
    """The table entry for ``name`` (case-insensitive), or ``None``."""
    return PUBLISHED.get(name) or next((m for m in PUBLISHED.values() if m.name.lower() == name.lower()), None)


def published_by_url(url: str) -> Optional[PublishedModel]:
    """The entry whose options or weights URL is ``url`` (either S3 host spelling), or ``None``."""
    canonical = url.replace("https://allennlp.s3.amazonaws.com/", "https://s3-us-west-2.amazonaws.com/allennlp/")
    return next((m for m in PUBLISHED.values() if canonical in m.urls), None)
