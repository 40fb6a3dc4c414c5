"""A short training check with two real gloo worker processes: the FP32 hooks give parameters
bit-identical to DDP's built-in all-reduce, every route runs under DDP, the report files are
written, and a NaN injected into one worker's gradient makes the runtime policy fall back to
FP32 and re-admit the region after its healthy stretch. One launch of the workers serves every
test here."""

import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from neuron_fabric.experiments import train_check  # noqa: E402
from neuron_fabric.golden.params import FabricParams  # noqa: E402
from neuron_fabric.experiments.train_check import Arm  # noqa: E402

DIGITS = {"channels": (4, 8), "hidden": 16, "batch": 8, "train_steps": 10}
CHAR_LM = {"train_steps": 5, "batch": 4, "context": 32, "d_model": 32, "heads": 2,
           "bytes_per_file": 4096, "eval_windows": 8}
RUNTIME_CHANGES = {"warmup_steps": 2, "health": {"readmit_after": 3, "settle_steps": 0}}
# Tiny buckets: several per step, so that the order of reassembly matters too.
SMALL_BUCKETS = {"bucket_cap_mb": 0.002}
ARMS = (
    Arm(name="smoke/fp32", group="smoke", workload="digits_cnn", model=DIGITS, profile="fp32",
        label="FP32", **SMALL_BUCKETS),
    Arm(name="smoke/ddp-default", group="smoke", workload="digits_cnn", model=DIGITS,
        profile="fp32", label="DDP without a hook", hook="none", **SMALL_BUCKETS),
    Arm(name="smoke/fabric-fp32", group="smoke", workload="digits_cnn", model=DIGITS,
        profile="fp32", label="Routing hook, all FP32", hook="fabric", **SMALL_BUCKETS),
    Arm(name="smoke/gbinary", group="smoke", workload="digits_cnn", model=DIGITS,
        profile="layer_gbinary", label="G-Binary backbone"),
    Arm(name="smoke/runtime", group="smoke", workload="digits_cnn", model=DIGITS,
        profile="runtime", label="Runtime with a fault", changes=RUNTIME_CHANGES,
        inject_nan=(4, "hidden.weight")),
    Arm(name="lm/gternary", group="lm", workload="char_lm", model=CHAR_LM, profile="gternary",
        label="G-Ternary everywhere"),
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    result = train_check.run(out, arms=ARMS, workers=2, eval_every=5, log=lambda text: None)
    return out, result


def test_report_files_are_written(report):
    out, result = report
    assert json.loads((out / "report.json").read_text())["workers"] == 2
    assert "| G-Binary backbone |" in (out / "report.md").read_text()
    assert "| COUNTS | 8 | 5 | 3 (38%) |" in (out / "report.md").read_text()
    assert (out / "loss_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [arm["name"] for arm in result["arms"]] == [arm.name for arm in ARMS]


def test_fp32_hooks_are_bit_identical_to_the_default_all_reduce(report):
    _, result = report
    digests = {arm["name"]: arm["param_sha256"] for arm in result["arms"]}
    assert digests["smoke/fp32"] == digests["smoke/ddp-default"]
    assert digests["smoke/fabric-fp32"] == digests["smoke/ddp-default"]
    assert digests["smoke/gbinary"] != digests["smoke/ddp-default"]  # the digest does tell


def test_every_arm_trains_to_a_finite_result(report):
    _, result = report
    for arm in result["arms"]:
        assert math.isfinite(arm["metrics"][arm["final_metric"]]), arm["name"]
        assert len(arm["losses"]) == arm["config"]["train_steps"]
        assert all(math.isfinite(loss) for loss in arm["losses"]), arm["name"]


def test_low_bit_traffic_is_a_small_share_of_fp32(report):
    _, result = report
    rows = {row["name"]: row for row in result["rows"]}
    assert rows["smoke/fp32"]["device_share"] == 1.0
    assert rows["smoke/fabric-fp32"]["device_share"] == 1.0
    assert 0.03 < rows["smoke/gbinary"]["device_share"] < 0.2  # the head is large here
    assert rows["lm/gternary"]["device_share"] == pytest.approx(1 / 16, rel=0.05)
    assert rows["smoke/gbinary"]["step_time_relative"] > 0


def test_injected_fault_falls_back_and_is_readmitted(report):
    _, result = report
    arm = {a["name"]: a for a in result["arms"]}["smoke/runtime"]
    assert arm["skipped_steps"] == [4]  # the NaN step updates nothing
    assert arm["events"] == [
        {"step": 4, "region": "backbone", "event": "fallback", "reason": "non-finite gradient"},
        {"step": 7, "region": "backbone", "event": "readmit", "reason": "3 healthy steps on FP32"},
    ]
    # Warm-up steps 0-1 and fallback steps 5-7 ran FP32; steps 2-4 and 8-9 low-bit.
    assert arm["lowbit_steps"] == 5


# --------------------------------------------------------------------------- readout lines

def test_readout_lines_table_compares_padded_lanes_with_bit_planes_at_the_defaults():
    table = train_check._readout_lines_table()
    assert (table["line_bits"], table["max_workers"], table["counter_bits"]) == (512, 16, 5)
    got = {row["readout"]: (row["padded_lane_lines"], row["bit_plane_lines"], row["saved_lines"])
           for row in table["rows"]}
    # padded lanes: 512 counters of 8 bits, 256 sums of 8 bits; bit-planes: 5 and 3 planes
    assert got == {"SIGN": (1, 1, 0), "TERNARY": (2, 2, 0), "COUNTS": (8, 5, 3),
                   "GATED": (1, 1, 0), "SUMS": (4, 3, 1)}


@pytest.mark.parametrize("line_bits,max_workers,counts,sums", [
    (128, 4, (4, 3), (2, 2)),     # 3-bit counters in 4-bit lanes, 4-bit sums
    (1024, 8, (4, 4), (4, 3)),    # 4-bit counters, 5-bit sums padded to 8
    (256, 64, (8, 7), (4, 4)),    # 7-bit counters, 8-bit sums
])
def test_readout_lines_table_for_other_devices(line_bits, max_workers, counts, sums):
    table = train_check._readout_lines_table(FabricParams(line_bits=line_bits, max_workers=max_workers))
    rows = {row["readout"]: (row["padded_lane_lines"], row["bit_plane_lines"]) for row in table["rows"]}
    assert rows["COUNTS"] == counts and rows["SUMS"] == sums
    assert rows["SIGN"] == rows["GATED"] == (1, 1) and rows["TERNARY"] == (2, 2)


def test_report_markdown_has_the_readout_lines_section():
    report = {"workers": 2, "seed": 0, "quick": True, "rows": [], "targets": [],
              "readout_lines": train_check._readout_lines_table()}
    text = train_check._markdown(report)
    assert "## Readout lines per slot (512-bit lines, 16 workers, 5-bit counters)" in text
    assert "| readout | padded-lane format | bit-planes | saved |" in text
    assert "| SUMS | 4 | 3 | 1 (25%) |" in text and "| SIGN | 1 | 1 | 0 |" in text


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "workers must be between 1 and 64, not 0"),
    (["--seed", "x"], "seed must be an integer, not 'x'"),
    (["--only", "nothing"], "invalid choice: 'nothing'"),
])
def test_the_command_line_refuses_bad_arguments_before_training(argv, message, capsys,
                                                                monkeypatch):
    monkeypatch.setattr(train_check, "run", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit) as exit_info:
        train_check.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_line_shows_a_fault_with_its_traceback(monkeypatch):
    def faulty(*args, **kwargs):
        raise TypeError("a fault in a training arm")

    monkeypatch.setattr(train_check, "run", faulty)
    with pytest.raises(TypeError, match="a fault in a training arm"):
        train_check.main(["--workers", "2"])
