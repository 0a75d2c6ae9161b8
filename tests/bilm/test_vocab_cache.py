"""The token-vector LRU (spacy_elmo.bilm.vocab_cache) against a plain-dict model over random call sequences.

A hypothesis state machine drives one cache of a random capacity through random batches (fresh tokens, tokens
seen before, batches larger than the cache, ``clear``, a capacity change as ``configure_cache`` makes it) and
after every call compares it with an ``OrderedDict`` LRU of the same capacity: the same tokens cached in the same
order of use, every slot either a cached token's or free, and every returned vector the encoder's own.
"""

import random

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from spacy_elmo.bilm import BiLM, batch_to_char_ids
from spacy_elmo.bilm.vocab_cache import TokenVectorCache
from tests.bilm.test_inference_path import _options
from tests.numerics import assert_recomputed_close

OPTIONS = _options(cell_dim=8, n_layers=1)  # the inference tests' small biLM, one narrow layer
# Capacities around the slab's first size (1024), where growing and evicting meet, and small ones that evict at once.
CAPACITIES = [20000, 2100, 1030, 1000, 40, 5, 2, 1, 0]
POOL = [f"w{i}" for i in range(60)] + ["the", "bank", ",", "Zürich", "x" * 60, "1965"]


def _model() -> BiLM:
    torch.manual_seed(0)
    return BiLM(OPTIONS).eval()


MODEL = _model()


def encoder_vectors(tokens: list[str]) -> torch.Tensor:
    """The reference: the token encoder on these tokens alone, no cache."""
    with torch.inference_mode():
        return MODEL.encode_tokens(torch.as_tensor(batch_to_char_ids([tokens])))[0]


class TokenCacheMachine(RuleBasedStateMachine):
    @initialize(
        capacity=st.sampled_from(CAPACITIES),
        first=st.lists(st.sampled_from(POOL), max_size=5, unique=True),
    )
    def start(self, capacity: int, first: list[str]) -> None:
        """A cache of some capacity, mostly after a first small call (``v.transform(["a great movie"])``)."""
        self.cache = TokenVectorCache(MODEL, capacity)
        self.lru: dict[str, None] = {}  # the model: insertion order is the order of use, oldest first
        self.fresh = 0
        if first:
            self._call(first)

    def _fresh(self, n: int) -> list[str]:
        self.fresh += n
        return [f"new{i}" for i in range(self.fresh - n, self.fresh)]

    def _call(self, tokens: list[str]) -> None:
        with torch.inference_mode():
            got = self.cache.vectors(tokens)
        assert got.shape == (len(tokens), OPTIONS.projection_dim)
        assert_recomputed_close(got, encoder_vectors(tokens))
        if len(tokens) > self.cache.max_tokens:  # too big to cache: encoded directly, the cache untouched
            return
        missing = [t for t in tokens if t not in self.lru]
        for token in tokens:  # hits become the most recently used, in the batch's order
            if token in self.lru:
                self.lru[token] = self.lru.pop(token)
        overflow = len(self.lru) + len(missing) - self.cache.max_tokens
        for token in list(self.lru)[: max(0, overflow)]:  # the least recently used go first
            del self.lru[token]
        self.lru.update(dict.fromkeys(missing))

    @rule(tokens=st.lists(st.sampled_from(POOL), min_size=1, max_size=12, unique=True), n_new=st.integers(0, 6))
    def small_batch(self, tokens: list[str], n_new: int) -> None:
        batch = tokens + self._fresh(n_new)
        random.Random(len(batch)).shuffle(batch)
        self._call(batch)

    @rule(n_new=st.integers(900, 1300), n_seen=st.integers(0, 30))
    def many_distinct_tokens(self, n_new: int, n_seen: int) -> None:
        """A text with many distinct tokens (figures, item numbers) after small calls: more than the first slab."""
        self._call(list(self.lru)[:n_seen] + self._fresh(n_new))

    @precondition(lambda self: len(self.lru) > 0)
    @rule(data=st.data())
    def only_cached_tokens(self, data: st.DataObject) -> None:
        tokens = data.draw(st.lists(st.sampled_from(list(self.lru)), min_size=1, max_size=20, unique=True))
        self._call(tokens)

    @rule()
    def clear(self) -> None:
        self.cache.clear()
        self.lru.clear()

    @rule(capacity=st.sampled_from(CAPACITIES))
    def new_capacity(self, capacity: int) -> None:
        """What ``ElmoBackend.configure_cache(token_cache_size=...)`` does."""
        self.cache.max_tokens = capacity
        self.cache.clear()
        self.lru.clear()

    @invariant()
    def same_tokens_in_the_same_order_of_use(self) -> None:
        assert list(self.cache._slots) == list(self.lru)
        assert len(self.cache) == len(self.lru) <= self.cache.max_tokens

    @invariant()
    def every_slot_is_a_tokens_or_free(self) -> None:
        capacity = self.cache._slab.shape[0] if self.cache._slab.dim() == 2 else 0
        assert capacity <= self.cache.max_tokens
        used, free = list(self.cache._slots.values()), self.cache._free
        assert sorted(used + free) == list(range(capacity))


TestTokenCacheMachine = pytest.mark.slow(TokenCacheMachine.TestCase)
TokenCacheMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
)


def test_many_distinct_tokens_after_a_small_call():
    """The reported crash: a call of 3 tokens, then one of 1100 new ones (the first slab holds 1024)."""
    cache = TokenVectorCache(MODEL, 20000)
    with torch.inference_mode():
        cache.vectors(["a", "great", "movie"])
        tokens = [f"item{i}" for i in range(1100)]
        assert_recomputed_close(cache.vectors(tokens), encoder_vectors(tokens))
    assert len(cache) == 1103
