"""Shared fixtures."""

import fcntl
import os
import shutil

import pytest

#: Reduced capture settings for the test suite: real training on real data, only fewer steps
#: and a smaller language model, so that both captures take a few seconds together.
SMALL_TRACES = {
    "digits_cnn": {"train_steps": 12, "steps": (0, 6, 11), "batch": 16},
    "char_lm": {"train_steps": 8, "steps": (0, 4, 7), "batch": 4, "context": 32,
                "d_model": 32, "heads": 2, "bytes_per_file": 4096, "eval_windows": 16},
}


@pytest.fixture(scope="session")
def traces(tmp_path_factory):
    """``{workload: Trace}``: gradients of 4 workers at 3 steps of short real training runs
    (seed 0), captured once per session."""
    from neuron_fabric.experiments import traces as traces_module

    out = tmp_path_factory.mktemp("traces")
    return {workload: traces_module.load(traces_module.capture(workload, out, workers=4,
                                                               seed=0, **options))
            for workload, options in SMALL_TRACES.items()}


def made_once(tmp_path_factory, name, make):
    """The folder ``name``, filled by ``make(folder)`` once per pytest run and read (never
    written) by the tests. Under pytest-xdist the first worker to ask makes it in the run's
    temporary folder, and the others wait for it on a lock and share it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def small_verilog(tmp_path_factory):
    """The small preset's Verilog folder (``make verilog PRESET=small``), generated once per
    pytest run for every test that reads it."""
    from neuron_fabric.gen.verilog import generate
    from neuron_fabric.golden.params import PRESETS

    name = PRESETS["small"].name
    return made_once(tmp_path_factory, "verilog", lambda folder: generate(
        PRESETS["small"], folder / name, log=lambda line: None)) / name


@pytest.fixture(scope="session")
def small_axi_verilog(tmp_path_factory):
    """The small preset's AXI top folder (``make verilog PRESET=small`` writes it beside the
    native top), generated once per pytest run."""
    from neuron_fabric.gen.axi import axi_folder_name, generate_axi
    from neuron_fabric.golden.params import PRESETS

    name = axi_folder_name(PRESETS["small"])
    return made_once(tmp_path_factory, "axi_verilog", lambda folder: generate_axi(
        PRESETS["small"], folder / name, log=lambda line: None)) / name


@pytest.fixture(scope="session")
def read_fold_bug_verilog(small_verilog, tmp_path_factory):
    """A copy of the small preset's Verilog in which tile 1 alone (line bits 32 to 63) folds
    the data line of every request: its addends' low bits take the line's first bit of each
    pair whether or not a write folds (their choice by the fold word's ``fold_any`` tied
    high), so a read's data line, which the top must ignore, adds to the rows it reads out."""
    import re
    import shutil

    from neuron_fabric.golden.params import PRESETS
    from neuron_fabric.hw.schedule import fold_word_layout

    p = PRESETS["small"]
    folder = tmp_path_factory.mktemp("read_fold_bug") / p.name
    shutil.copytree(small_verilog, folder)
    top = folder / f"nfabric_{p.name}.v"
    fold_any = fold_word_layout(max_workers=p.max_workers,
                                counter_bits=p.counter_bits)["fold_any"].offset
    text = top.read_text(encoding="utf-8")
    start = text.index(f"module nfabric_{p.name}__tile_1(")
    end = text.index("endmodule", start)
    body, count = re.subn(rf"tile_fold_word\[{fold_any}\] \? (\{{[^}}]*line_\d+\[0\] \}})",
                          r"1'b1 ? \1", text[start:end])
    assert count == 1, "expected tile 1's addends' low bits"
    top.write_text(text[:start] + body + text[end:], encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A one-worker gloo process group in this process, for the tests of one module."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    store = tmp_path_factory.mktemp("store") / "file"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
