"""The regression's plan: which jobs each simulator runs, on which top, with how much trace."""

import pytest

from neuron_fabric.sim.regression import jobs_for

FOLDERS = dict(top="top", small="small", narrow="narrow", seeds=[1, 2])


def _controller(jobs):
    (job,) = [j for j in jobs if j.name == "controller"]
    return job, dict(job.env)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_both_simulators_run_every_controller_test_on_the_default_top(simulator):
    job, env = _controller(jobs_for(simulator, **FOLDERS))
    assert (job.manifest, job.role, job.test_filter) == ("top", "controller", None)
    assert env["NFABRIC_SEEDS"] == "1,2"


def test_icarus_replays_the_traces_cut_short_unless_asked_for_every_step():
    _, env = _controller(jobs_for("icarus", **FOLDERS))
    assert (env["NFABRIC_TRACE_STEPS"], env["NFABRIC_TRACE_LINES"]) == ("2", "16")
    _, env = _controller(jobs_for("icarus", icarus_full_traces=True, **FOLDERS))
    assert env["NFABRIC_TRACE_STEPS"] == "all" and "NFABRIC_TRACE_LINES" not in env


def test_verilator_replays_every_step_unless_told_to_cut_them():
    _, env = _controller(jobs_for("verilator", **FOLDERS))
    assert env["NFABRIC_TRACE_STEPS"] == "all" and "NFABRIC_TRACE_LINES" not in env
    _, env = _controller(jobs_for("verilator", full_traces=False, **FOLDERS))
    assert (env["NFABRIC_TRACE_STEPS"], env["NFABRIC_TRACE_LINES"]) == ("2", "16")


def test_the_axi_tops_run_the_512_bit_one_on_verilator_and_the_small_one_on_icarus():
    folders = dict(FOLDERS, axi_top="axi_top", axi_small="axi_small")
    (verilator,) = [j for j in jobs_for("verilator", **folders) if j.name == "axi"]
    assert (verilator.manifest, verilator.role, verilator.module) == (
        "axi_top", "axi_controller", "neuron_fabric.sim.tb_axi")
    assert dict(verilator.env)["NFABRIC_TRACE_STEPS"] == "all"
    (icarus,) = [j for j in jobs_for("icarus", **folders) if j.name == "axi"]
    assert icarus.manifest == "axi_small"
    assert (dict(icarus.env)["NFABRIC_TRACE_STEPS"], dict(icarus.env)["NFABRIC_TRACE_LINES"]) \
        == ("1", "12")
    assert not [j for j in jobs_for("verilator", **FOLDERS) if j.name == "axi"]
