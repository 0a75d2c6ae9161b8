from spacy_elmo.bilm.chars import batch_to_char_ids, token_to_char_ids


def expected(core):
    ids = [259, *core, 260]
    return ids + [261] * (50 - len(ids))


def test_ascii_word_is_bytes_plus_one():
    assert token_to_char_ids("Ab").tolist() == expected([ord("A") + 1, ord("b") + 1])


def test_utf8_multibyte():
    # "é" is two UTF-8 bytes, 0xC3 0xA9
    assert token_to_char_ids("é").tolist() == expected([0xC3 + 1, 0xA9 + 1])


def test_sentence_markers():
    assert token_to_char_ids("<S>").tolist() == expected([257])
    assert token_to_char_ids("</S>").tolist() == expected([258])


def test_long_token_cut_to_48_bytes():
    ids = token_to_char_ids("x" * 100)
    assert ids.tolist() == [259] + [ord("x") + 1] * 48 + [260]


def test_batch_pads_with_zero_tokens():
    batch = batch_to_char_ids([["a", "b", "c"], ["d"]])
    assert batch.shape == (2, 3, 50)
    assert (batch[1, 1:] == 0).all()
    assert (batch[1, 0] > 0).any()
    assert batch_to_char_ids([]).shape == (0, 0, 50)


def test_many_tokens_at_once_match_one_by_one():
    from spacy_elmo.bilm.chars import tokens_to_char_ids

    tokens = ["", "a", "<S>", "bank", "é" * 30, "x" * 47, "x" * 48, "x" * 49, "</S>", "naïve", "\u2603", " ", "<S>x"]
    many = tokens_to_char_ids(tokens)
    assert many.dtype == token_to_char_ids("a").dtype
    assert many.tolist() == [token_to_char_ids(t).tolist() for t in tokens]
    assert tokens_to_char_ids([]).shape == (0, 50)
