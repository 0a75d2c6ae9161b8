"""ElmoScalarMix.v2 / ElmoFineTune.v1 as a spacy.Tok2Vec's whole embed (the obvious swap of a MultiHashEmbed): a
width the encoder does not take is an ELMo error naming both widths and the projection, not Thinc's dimension error."""

import pytest
import spacy

from tests.spacy.conftest import textcat_reduce
from tests.spacy.test_spacy_fine_tune import examples

FIXTURE_WIDTH = 32  # the fixture model's layers: 2 x its projection_dim of 16


def tok2vec_textcat(fixture_dir, embed: dict, width: int):
    """elmo + textcat over spacy.Tok2Vec.v2(embed, MaxoutWindowEncoder.v2 of ``width``), not initialized."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    encode = {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": width, "depth": 1, "window_size": 1}
    tok2vec = {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": {**encode, "maxout_pieces": 2}}
    model = textcat_reduce(tok2vec, nO=None)
    nlp.add_pipe("textcat", config={"model": model})
    return nlp


@pytest.mark.parametrize("layer", ["ElmoScalarMix", "ElmoFineTune"])
def test_a_bare_mix_before_a_narrower_encoder_names_the_projection(fixture_dir, layer):
    architecture = {"ElmoScalarMix": "spacy_elmo.ElmoScalarMix.v2", "ElmoFineTune": "spacy_elmo.ElmoFineTune.v1"}
    nlp = tok2vec_textcat(fixture_dir, {"@architectures": architecture[layer]}, width=64)
    with pytest.raises(ValueError) as raised:
        nlp.initialize(lambda: examples(nlp))
    message = str(raised.value)
    assert message.startswith(f"{layer} gives vectors as wide as the ELMo model's layers ({FIXTURE_WIDTH}")
    assert "component 'textcat' whose encode takes width 64" in message
    assert f"chain({layer}, with_array(Maxout.v1 with nO = 64))" in message and "docs/training.md" in message


def test_a_bare_mix_as_wide_as_the_encoder_trains(fixture_dir):
    """No projection is needed where the encoder takes the model's width: nothing is refused."""
    nlp = tok2vec_textcat(fixture_dir, {"@architectures": "spacy_elmo.ElmoScalarMix.v2"}, width=FIXTURE_WIDTH)
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    losses = nlp.update(egs, sgd=optimizer)
    assert losses["textcat"] > 0


def test_the_mix_with_a_projection_trains(fixture_dir):
    """The fix the message names: chain(mix, with_array(Maxout nO=width)) before the 64-wide encoder."""
    project = {"@layers": "with_array.v1", "layer": {"@layers": "Maxout.v1", "nO": 64, "nP": 2}}
    embed = {"@layers": "chain.v1", "*": {"features": {"@architectures": "spacy_elmo.ElmoScalarMix.v2"}, "p": project}}
    nlp = tok2vec_textcat(fixture_dir, embed, width=64)
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    assert nlp.update(egs, sgd=optimizer)["textcat"] > 0
