"""target_log_prob: each row's target log-probability and its gradient, against log_softmax + gather."""

import pytest
import torch
from torch.nn import functional as F

from spacy_elmo.train.network import target_log_prob as target_log_prob_module
from spacy_elmo.train.network.target_log_prob import target_log_prob


def _both(logits: torch.Tensor, target: torch.Tensor, grad: torch.Tensor):
    """(value, gradient) of target_log_prob and of the reference, for the same upstream gradient."""
    results = []
    for function in (target_log_prob, lambda x, t: F.log_softmax(x.float(), 1).gather(1, t[:, None])[:, 0]):
        x = logits.detach().clone().requires_grad_()
        value = function(x, target)
        (value * grad).sum().backward()
        results.append((value.detach(), x.grad))
    return results


@pytest.mark.parametrize("block_elements", [None, 5 * 3000 + 1])
def test_value_and_gradient_agree_with_log_softmax_and_gather(block_elements, monkeypatch):
    if block_elements:  # 5 rows per block: 13 blocks, the last one short
        monkeypatch.setattr(target_log_prob_module, "BLOCK_ELEMENTS", block_elements)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 3000, generator=generator, dtype=torch.float64) * 6
    target = torch.randint(0, 3000, (64,), generator=generator)
    target[:5] = target[0]  # repeated targets
    grad = torch.randn(64, generator=generator, dtype=torch.float64)
    (ours, ours_grad), _ = _both(logits, target, grad)
    # independent numbers: float64 by hand, softmax minus one-hot
    log_z = torch.log(torch.exp(logits - logits.max(1, keepdim=True).values).sum(1)) + logits.max(1).values
    expected = logits[torch.arange(64), target] - log_z
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-12)
    one_hot = F.one_hot(target, 3000).double()
    torch.testing.assert_close(ours_grad, grad[:, None] * (one_hot - torch.softmax(logits, 1)), rtol=1e-10, atol=1e-14)


def test_bfloat16_logits_give_float32_values_and_a_bfloat16_gradient():
    """Mixed precision: float32 log-probabilities (not rounded to bfloat16), as log_softmax on .float() gives."""
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(40, 5000, generator=generator) * 4).bfloat16()
    target = torch.randint(0, 5000, (40,), generator=generator)
    grad = torch.randn(40, generator=generator)
    (ours, ours_grad), (theirs, theirs_grad) = _both(logits, target, grad)
    assert ours.dtype == torch.float32 and ours_grad.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ours_grad.float(), theirs_grad.float(), rtol=1e-2, atol=1e-6)


def test_a_second_backward_pass_gives_the_same_gradient():
    """Nothing kept is overwritten by the backward pass: retain_graph works as for any torch operation."""
    logits = torch.randn(3, 7, requires_grad=True)
    value = target_log_prob(logits, torch.tensor([0, 6, 2])).sum()
    (first,) = torch.autograd.grad(value, logits, retain_graph=True)
    (second,) = torch.autograd.grad(value, logits)
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    torch.testing.assert_close(first, torch.eye(7)[[0, 6, 2]] - torch.softmax(logits.detach(), 1))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="rows, classes"):
        target_log_prob(torch.zeros(3, 7), torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adaptive_log_prob_agrees_with_the_modules_own_forward(dtype):
    """The trainer's softmax (every precision) gives torch's AdaptiveLogSoftmaxWithLoss values and gradients."""
    from spacy_elmo.train.network.language_model import adaptive_log_prob

    torch.manual_seed(0)
    softmax = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 60, [10, 30], div_value=2.0).to(dtype)
    hidden = torch.randn(40, 16, dtype=dtype, requires_grad=True)
    target = torch.cat([torch.tensor([0, 9, 10, 29, 30, 59]), torch.randint(0, 60, (34,))])  # every cluster's edges
    ours = adaptive_log_prob(softmax, hidden, target)
    ours_grads = torch.autograd.grad(ours.sum(), [hidden, *softmax.parameters()])
    theirs = softmax(hidden, target).output
    theirs_grads = torch.autograd.grad(theirs.sum(), [hidden, *softmax.parameters()])
    tol = 1e-6 if dtype == torch.float64 else 1e-5
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, theirs, rtol=tol, atol=tol)
    for mine, reference in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(mine, reference, rtol=tol, atol=tol)
