"""The golden model against a plain PyTorch reference, on real training gradients.

The reference is written the obvious way (signs, sums, comparisons in torch) and shares no
code with the golden model; the gradients are every worker's bucket at several steps of
the real training runs in the ``traces`` fixture.
"""

import numpy as np
import pytest
import torch

from neuron_fabric.golden import fp32, gbinary, gternary
from neuron_fabric.golden.formats import Readout

LINE_BITS = 512
COUNTER_BITS = 5  # max_workers = 16


def worker_buckets(trace, step_index, roles=None):
    return [trace.bucket(step_index, worker, roles) for worker in range(trace.workers)]


def torch_majority(grads):
    """-1/0/+1 per element: the sign most workers' gradients have (0 on a tie)."""
    negative_votes = (torch.stack(grads) < 0).sum(dim=0)
    return torch.sign(len(grads) - 2 * negative_votes).to(torch.int8)


def torch_ternary(grad, ratio):
    tau = ratio * grad.abs().max()
    return torch.where(grad.abs() >= tau, torch.sign(grad), torch.zeros_like(grad)).to(torch.int8)


@pytest.mark.parametrize("workload", ["digits_cnn", "char_lm"])
def test_gbinary_majority_matches_torch_on_real_gradients(traces, workload):
    trace = traces[workload]
    for step_index in range(len(trace.steps)):
        buckets = worker_buckets(trace, step_index)
        n = buckets[0].size
        lines = np.stack([gbinary.encode(b, line_bits=LINE_BITS) for b in buckets])
        counts = gbinary.aggregate(lines, max_workers=16)
        majority = gbinary.majority(counts, num_workers=trace.workers).ravel()[:n]
        expected = torch_majority([torch.from_numpy(b) for b in buckets]).numpy()
        np.testing.assert_array_equal(majority, expected)
        # The TERNARY readout carries the same majority, ties included.
        readout = gbinary.readout(counts, readout=Readout.TERNARY, num_workers=trace.workers,
                                  counter_bits=COUNTER_BITS)
        decoded = gbinary.decode(readout, readout=Readout.TERNARY, n_elements=n)
        np.testing.assert_array_equal(decoded, expected)


@pytest.mark.parametrize("workload", ["digits_cnn", "char_lm"])
@pytest.mark.parametrize("ratio, gate", [(0.0, 1), (0.2, 2), (0.5, 3)])
def test_gternary_gated_sum_matches_torch_on_real_gradients(traces, workload, ratio, gate):
    trace = traces[workload]
    for step_index in range(len(trace.steps)):
        buckets = worker_buckets(trace, step_index)
        n = buckets[0].size
        lines = np.stack([gternary.encode(b, ratio=ratio, line_bits=LINE_BITS) for b in buckets])
        sums = gternary.aggregate(lines, max_workers=16)
        readout = gternary.readout(sums, readout=Readout.GATED, gate=gate, counter_bits=COUNTER_BITS)
        got = gternary.decode(readout, readout=Readout.GATED, n_elements=n)
        total = torch.stack([torch_ternary(torch.from_numpy(b), ratio) for b in buckets]).sum(dim=0)
        expected = torch.where(total.abs() >= gate, torch.sign(total), torch.zeros_like(total))
        np.testing.assert_array_equal(got, expected.to(torch.int8).numpy())
        raw = gternary.decode(gternary.readout(sums, readout=Readout.SUMS, gate=gate,
                                               counter_bits=COUNTER_BITS),
                              readout=Readout.SUMS, n_elements=n, counter_bits=COUNTER_BITS)
        np.testing.assert_array_equal(raw, total.numpy())


@pytest.mark.parametrize("workload", ["digits_cnn", "char_lm"])
def test_protected_parameters_pass_through_fp32_byte_exact(traces, workload):
    trace = traces[workload]
    head = trace.bucket(len(trace.steps) - 1, 0, roles=("head", "norm"))
    assert head.size > 0
    lines = fp32.identity(fp32.to_lines(head, line_bits=LINE_BITS))
    back = fp32.from_lines(lines, n_elements=head.size, line_bits=LINE_BITS)
    assert back.tobytes() == torch.from_numpy(head).numpy().tobytes()


@pytest.mark.parametrize("workload", ["digits_cnn", "char_lm"])
def test_real_gradients_are_not_degenerate(traces, workload):
    """Guards the comparisons above: real gradients have both signs, mostly non-zero, and
    workers disagree on some signs (otherwise a majority test proves little)."""
    buckets = worker_buckets(traces[workload], len(traces[workload].steps) - 1)
    signs = np.sign(np.stack(buckets))
    assert (signs > 0).mean() > 0.2 and (signs < 0).mean() > 0.2
    assert (signs != signs[0]).any(axis=0).mean() > 0.05
