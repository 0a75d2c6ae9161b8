"""The trainer's Adam: torch's fused kernel where it exists, the same update as the default kernel, and a fallback."""

import pytest
import torch

from spacy_elmo.train.run import trainer
from spacy_elmo.train.run.trainer import _keep_kernel_choice, adam


def _parameters(seed: int) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape, generator=generator)) for shape in ((40, 7), (7,), (3, 5, 2))]


def _run(optimizer: torch.optim.Optimizer, parameters: list[torch.nn.Parameter], steps: int = 5) -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for parameter in parameters:
            parameter.grad = torch.randn(parameter.shape, generator=generator)
        optimizer.step()


def _has_fused_cpu_adam() -> bool:
    """Whether this torch has a fused Adam kernel for CPU tensors (torch 2.4+), asked of torch itself."""
    try:
        torch.optim.Adam(_parameters(0), lr=1e-2, fused=True)
    except RuntimeError:
        return False
    return True


FUSED = _has_fused_cpu_adam()


@pytest.mark.skipif(not FUSED, reason="this torch has no fused CPU Adam (torch < 2.4): the next test's fallback runs")
def test_fused_adam_gives_the_default_kernels_update():
    fused_params, default_params = _parameters(0), _parameters(0)
    fused = adam(fused_params, 1e-2)
    assert fused.defaults["fused"] is True
    _run(fused, fused_params)
    _run(torch.optim.Adam(default_params, lr=1e-2, foreach=False), default_params)
    for got, want, start in zip(fused_params, default_params, _parameters(0)):
        assert float((got.detach() - start.detach()).abs().max()) > 1e-3  # the steps moved it
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_without_a_fused_kernel_the_default_one_is_used(monkeypatch):
    original = torch.optim.Adam

    def without_fused(params, lr, fused=None):
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return original(params, lr=lr)

    monkeypatch.setattr(trainer.torch.optim, "Adam", without_fused)
    optimizer = adam(_parameters(0), 1e-2)
    assert not optimizer.defaults.get("fused")


def test_a_restored_state_keeps_this_torchs_kernel_choice():
    saved = torch.optim.Adam(_parameters(0), lr=1e-2, foreach=True)
    _run(saved, saved.param_groups[0]["params"], steps=2)
    parameters = _parameters(0)
    restored = adam(parameters, 1e-2)
    restored.load_state_dict(saved.state_dict())
    assert restored.param_groups[0]["fused"] is None  # load_state_dict brought the saved flags
    _keep_kernel_choice(restored)
    assert bool(restored.param_groups[0]["fused"]) is FUSED  # this torch's kernel, not the saved flags
    _run(restored, parameters, steps=1)  # the restored state (step counts, moments) works with this torch's kernel
