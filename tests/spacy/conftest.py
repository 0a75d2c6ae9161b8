"""What the spaCy tests share: the text classifier their pipelines put over ELMo features."""


def textcat_reduce(tok2vec: dict, **fields) -> dict:
    """A spacy.TextCatReduce.v1 model config (exclusive classes; max and mean pooled) over ``tok2vec``."""
    return {
        "@architectures": "spacy.TextCatReduce.v1",
        "exclusive_classes": True,
        "tok2vec": tok2vec,
        "use_reduce_first": False,
        "use_reduce_last": False,
        "use_reduce_max": True,
        "use_reduce_mean": True,
        **fields,
    }
