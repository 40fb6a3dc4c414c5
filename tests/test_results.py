"""The results table: filled from the reports, absent ones marked, written under build/; the
README's copy rewritten in place only on request, keeping the rows whose report is absent."""

import json
import pathlib
import subprocess

import pytest

from neuron_fabric.experiments import results

README = f"""# neuron-fabric

Text before the table, kept as it is.

{results.BEGIN}
| old | table |
{results.END}

Text after the table, kept too.
"""


def _grade(grade, speed, fmax, seeds):
    return {"grade": grade, "speed": speed, "fmax_median_mhz": fmax,
            "seeds": [{"seed": s, "fmax_mhz": fmax} for s in seeds],
            "utilization": {"lut4": 31899, "carry_cells": 306, "ff": 29454, "bram": 81}}


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _fake_reports(build):
    """Small reports with the keys the targets write, and round numbers."""
    _write(build / "fpga" / "report.json", {
        "default": {"top": {"grades": {"s6": _grade("LFE5U-85F", 6, 90.8, [1, 2, 3]),
                                       "s8": _grade("LFE5UM5G-85F", 8, 124.4, [1, 2, 3])}}},
        "timing_model": {"latency": {"gbinary_write": 8}}})
    quick = _grade("LFE5U-85F", 6, 100.0, [1])
    quick["utilization"] = {"lut4": 7000, "carry_cells": 300, "ff": 6000, "bram": 0}
    _write(build / "fpga-quick" / "report.json", {"default": {"top": {"grades": {"s6": quick}}},
                                                  "timing_model": {"latency": {"gbinary_write": 8}}})
    _write(build / "sim" / "summary.json", {"simulators": [
        {"simulator": "icarus", "tests": 20, "failed": 0, "lines_checked": 1000, "ok": True,
         "top": "l128_w4_c3_d8_n2", "top_cycles_per_s": None},
        {"simulator": "verilator", "tests": 30, "failed": 2, "lines_checked": 123456,
         "ok": False, "top": "l512_w16_c5_d64_n2", "top_cycles_per_s": 4321.0}],
        "harness": {"top": "l512_w16_c5_d64_n2", "rtl_cycles_per_s": 54321.0,
                    "ratio_rtl": 12.57}})
    _write(build / "train-rtl" / "report.json", {"params": {"line_bits": 512}, "runs": [
        {"steps": 60, "bit_identical_steps": 60, "device": {"cycles": 1000}},
        {"steps": 40, "bit_identical_steps": 40, "device": {"cycles": 234}}]})

    def arm(name, final, share, metric="test_accuracy"):
        return {"name": name, "final_metric": metric, "final": final, "device_share": share}

    _write(build / "train" / "report.json", {"quick": False, "rows": [
        arm("digits/fp32", 0.9972, 1.0), arm("digits/gbinary", 0.9944, 0.0313),
        arm("digits/runtime", 0.99, 0.1011),
        arm("char_lm/fp32", 2.17, 1.0, "val_loss"), arm("char_lm/runtime", 2.178, 0.226, "val_loss"),
        arm("hard/fp32", 0.9944, 1.0), arm("hard/gbinary", 0.2284, 0.0313)]})

    def run(stream, reduction, **kw):
        row = {"stream": stream, "order": "lockstep", "sets": 32, "ways": 4, "threshold": None,
               "small_threshold": None, "final_flush": True, "value_width": 16,
               "acc_width": 16, "byte_reduction": reduction}
        row.update(kw)
        return row

    _write(build / "combiner" / "report.json", {"workloads": {"digits_cnn": {}, "char_lm": {}},
                                                "rows": [
        run("seed phases", 3.71, order=None, threshold=50),
        run("seed phases", 5.53, order=None, threshold=50, final_flush=False),
        run("digits_cnn", 1.9, threshold=2048), run("digits_cnn", 4.34),
        run("digits_cnn", 1.2, order="random"), run("char_lm", 3.99)],
                                                "throughput": [
        {"stream": "seed phases", "updates_per_cycle": 0.848},
        {"stream": "digits_cnn", "updates_per_cycle": 0.98},
        {"stream": "char_lm", "updates_per_cycle": 1.0}]})
    _write(build / "bench" / "golden.json", {
        "workers": 8, "encode_share_of_copy": {"gbinary": 0.9, "gternary": 0.58},
        "lanes_per_s": {"gbinary_aggregate_planes": 3.47e9, "gternary_aggregate_planes": 1.06e9},
        "golden_rows_s": {f"{route}_{op}": 1.0 for route in ("gbinary", "gternary")
                          for op in ("encode", "aggregate_planes", "readout_planes", "decode")},
        "twin": {"cpu": {"gbinary_encode": 0.5, "gternary_encode": 2.0,
                         "gbinary_aggregate_planes": 0.25, "gternary_aggregate_planes": 4.0,
                         "gbinary_readout_planes": 1.0, "gternary_readout_planes": 0.8,
                         "gbinary_decode": 0.1, "gternary_decode": 0.2}}})

    def model(share):
        return {"profiles": {"layer_gbinary": {"device_share_steady": share}}}

    _write(build / "traffic" / "report.json", {"models": {
        "gpt2_small": model(0.3388), "resnet18_imagenet": model(0.0746)}})
    _write(build / "traffic" / "hook_cost.json", {
        "workers": 4, "target": {"model": "gpt2_small", "ratio": 1.5},
        "models": {"gpt2_small": {"settings": {
            "fp32": {"ratio_to_fp32": 1.0}, "bf16": {"ratio_to_fp32": 0.75},
            "gbinary": {"ratio_to_fp32": 1.25}, "gternary": {"ratio_to_fp32": 1.5},
            "layer_gbinary": {"ratio_to_fp32": 2.0}}}}})


def _rows(text):
    """The table's data rows as {result: (measured, report)}."""
    rows = {}
    for line in text.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert len(cells) == 3, line
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_table_rows_come_from_the_reports(tmp_path):
    build = tmp_path / "build"
    _fake_reports(build)
    text = results.table(build, relative_to=tmp_path)
    assert text.splitlines()[:2] == ["| Result | Measured | Report |", "|---|---|---|"]
    rows = _rows(text)
    assert list(rows) == [label for label, _, _ in results.ROWS]
    assert rows["512-bit top: Fmax"] == (
        "90.8 MHz at LFE5U-85F-6 (median of 3 seeds); 124.4 MHz at LFE5UM5G-85F-8 "
        "(median of 3 seeds)", "`build/fpga/report.md`")
    assert rows["512-bit top: area"][0] == (
        "31,899 LUT4 (306 CCU2C counted as two each), 29,454 FF, 81 DP16KD")
    assert rows["512-bit top: latency"][0] == "8 cycles, request to response: 88 ns at 90.8 MHz"
    assert rows["128-bit top (`small`): Fmax"] == ("100.0 MHz at LFE5U-85F-6 (one seed)",
                                                   "`build/fpga-quick/report.md`")
    assert rows["128-bit top (`small`): area"][0].startswith("7,000 LUT4 (300 CCU2C")
    assert rows["128-bit top (`small`): latency"][0] == (
        "8 cycles, request to response: 80 ns at 100.0 MHz")
    assert rows["cocotb on Verilator"][0] == (
        "**2 of 30 tests failed**, 123,456 lines checked; 4,321 cycles/s on "
        "`l512_w16_c5_d64_n2` under traffic")
    assert rows["cocotb on Icarus"] == ("20 tests passed, 1,000 lines checked",
                                        "`build/sim/summary.md`")
    assert rows["Verilator harness (no cocotb)"][0] == (
        "54,321 cycles/s on `l512_w16_c5_d64_n2` under checked random traffic, one core "
        "(12.6x cocotb's rate in the same run)")
    assert rows["Training with the RTL in the loop"] == (
        "100 of 100 steps bit-identical to the golden hooks over 2 runs (digits CNN and "
        "character LM; G-Binary, G-Ternary, mixed FP32 buckets); 1,234 cycles of the 512-bit "
        "top simulated", "`build/train-rtl/report.md`")
    assert rows["Training, digits CNN (test accuracy)"][0] == (
        "FP32 99.72%; G-Binary everywhere 99.44% at 3.13% of the device traffic; "
        "runtime policy 99.00% at 10.11% of the device traffic")
    assert rows["Training, character LM (validation loss)"][0] == (
        "FP32 2.170; runtime policy 2.178 at 22.60% of the device traffic")
    assert rows["Training, label-sorted digits (test accuracy)"][0] == (
        "FP32 99.44%; G-Binary everywhere 22.84% at 3.13% of the device traffic")
    assert rows["Write combiner: bytes written, reduction"] == (
        "digits_cnn 4.34x, char_lm 3.99x (32x4 buffer, no threshold, lock step, flush every "
        "step); the seed design's phases 3.71x; the hardware block takes 0.980 update a cycle "
        "on the traces and 0.848 on the seed's phases", "`build/combiner/report.md`")
    assert rows["Golden model, one core"] == (
        "encode at 0.90x (G-Binary) and 0.58x (G-Ternary) a memory copy's bandwidth; "
        "8-worker aggregation 3.47 and 1.06 G lanes/s", "`build/bench/golden.md`")
    assert rows["Traffic at paper scale"] == (
        "layer-aware G-Binary device traffic, % of FP32 after warm-up: ResNet-18 7.46%, "
        "GPT-2 small 33.88%", "`build/traffic/report.md`")
    assert rows["PyTorch twin of the lanes, one core"] == (
        "speed over the golden model's, G-Binary / G-Ternary: encode 2.00x / 0.50x, fold into "
        "bit-planes 4.00x / 0.25x, readout 1.00x / 1.25x, decode 10.00x / 5.00x",
        "`build/bench/golden.md`")
    assert rows["DDP hooks' step time"] == (
        "gpt2_small, 4 gloo workers, step over the FP32 all-reduce's: G-Binary 1.25x, "
        "G-Ternary 1.50x, layer-aware G-Binary 2.00x (bf16_compress_hook 0.75x); target at "
        "most 1.5x", "`build/traffic/hook_cost.md`")


def test_absent_reports_read_not_measured_yet(tmp_path):
    build = tmp_path / "build"
    _fake_reports(build)
    (build / "sim" / "summary.json").unlink()
    (build / "train" / "report.json").unlink()
    rows = _rows(results.table(build, relative_to=tmp_path))
    assert len(rows) == len(results.ROWS)
    for label in ("cocotb on Verilator", "cocotb on Icarus"):
        assert rows[label] == ("not measured yet (`make sim`)", "`build/sim/summary.md`")
    for label in [label for label, key, _ in results.ROWS if key == "train"]:
        assert rows[label][0] == "not measured yet (`make train-check`)"
    assert rows["512-bit top: Fmax"][0].startswith("90.8 MHz")


def test_every_row_is_marked_when_nothing_was_measured(tmp_path):
    rows = _rows(results.table(tmp_path / "empty", relative_to=tmp_path))
    assert len(rows) == len(results.ROWS)
    for label, key, _ in results.ROWS:
        target = results.SOURCES[key].target
        assert rows[label][0] == f"not measured yet (`make {target}`)"


def test_a_report_without_the_part_a_row_needs_says_so(tmp_path):
    build = tmp_path / "build"
    _write(build / "fpga" / "report.json", {"sweep": []})
    (build / "bench").mkdir()
    (build / "bench" / "golden.json").write_text("{ not json")
    rows = _rows(results.table(build, relative_to=tmp_path))
    assert rows["512-bit top: Fmax"][0] == (
        "not in the report yet (no default.top; `make fpga-ecp5`)")
    assert rows["Golden model, one core"][0].startswith("unreadable: ")
    assert rows["Golden model, one core"][0].endswith("; run `make bench-golden` again")


def test_rewrite_is_idempotent_and_keeps_the_rest(tmp_path):
    build = tmp_path / "build"
    _fake_reports(build)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert results.update_readme(readme, build) is True
    first = readme.read_text()
    before, _, rest = README.partition(results.BEGIN)
    _, _, after = rest.partition(results.END)
    assert first.startswith(before + results.BEGIN + "\n| Result | Measured | Report |")
    assert first.endswith("|\n" + results.END + after)
    assert "| old | table |" not in first
    assert results.update_readme(readme, build) is False
    assert readme.read_text() == first
    assert results.rewrite(first, results.table(build, relative_to=tmp_path)) == first


@pytest.mark.parametrize("text", ["no markers at all\n",
                                  f"{results.END}\n{results.BEGIN}\n",
                                  f"{results.BEGIN}\n{results.BEGIN}\n{results.END}\n"])
def test_readme_without_one_pair_of_markers_is_refused(text):
    with pytest.raises(ValueError, match="must hold the line"):
        results.rewrite(text, "| table |", name="README.md")


def test_a_row_whose_report_is_absent_keeps_its_line_in_the_readme(tmp_path):
    build = tmp_path / "build"
    _fake_reports(build)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results.update_readme(readme, build)
    measured = results.table_rows(readme.read_text())
    assert list(measured) == [label for label, _, _ in results.ROWS]
    # Another machine ran the quick flow and the training checks only.
    (build / "fpga" / "report.json").unlink()
    (build / "combiner" / "report.json").unlink()
    _write(build / "bench" / "golden.json", {
        "workers": 4, "encode_share_of_copy": {"gbinary": 1.5, "gternary": 0.5},
        "lanes_per_s": {"gbinary_aggregate_planes": 1e9, "gternary_aggregate_planes": 2e9}})
    assert results.update_readme(readme, build) is True
    rows = results.table_rows(readme.read_text())
    assert list(rows) == list(measured)
    for label, key, _ in results.ROWS:
        if key in ("fpga", "combiner"):
            assert rows[label] == measured[label], label
    assert rows["Golden model, one core"] != measured["Golden model, one core"]
    assert "4-worker aggregation" in rows["Golden model, one core"]
    assert "not measured yet" not in readme.read_text()


def test_a_row_never_measured_reads_not_measured_yet_in_the_readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results.update_readme(readme, tmp_path / "empty")
    rows = results.table_rows(readme.read_text())
    assert list(rows) == [label for label, _, _ in results.ROWS]
    assert all("| not measured yet (`make " in line for line in rows.values())


def test_command_line_writes_the_table_under_build_and_leaves_the_readme(tmp_path, capsys,
                                                                          monkeypatch):
    build = tmp_path / "build"
    _fake_reports(build)
    (build / "combiner" / "report.json").unlink()
    readme = tmp_path / "README.md"
    readme.write_text(README)
    monkeypatch.chdir(tmp_path)
    assert results.main(["--build", "build", "--out", "build/results.md"]) == 0
    out = capsys.readouterr().out
    written = (build / "results.md").read_text()
    assert written == results.table(pathlib.Path("build")) + "\n"
    assert written.rstrip("\n") in out
    assert "table written to build/results.md" in out
    assert "not measured yet: make combiner-eval" in out
    assert readme.read_text() == README


def test_command_line_rewrites_the_readme_and_names_what_is_kept(tmp_path, capsys):
    build = tmp_path / "build"
    _fake_reports(build)
    (build / "combiner" / "report.json").unlink()
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert results.main(["--build", str(build), "--readme", str(readme)]) == 0
    out = capsys.readouterr().out
    assert "rewritten" in out and "kept as they were (make combiner-eval)" in out
    assert "| Write combiner: bytes written, reduction | not measured yet" in readme.read_text()
    readme.write_text("no markers\n")
    assert results.main(["--build", str(build), "--readme", str(readme)]) == 2
    assert "must hold the line" in capsys.readouterr().err


def test_the_readme_holds_the_markers_and_a_line_for_every_row():
    readme = pathlib.Path(__file__).resolve().parent.parent / "README.md"
    rows = results.table_rows(readme.read_text(encoding="utf-8"))
    assert list(rows) == [label for label, _, _ in results.ROWS]


def _make_dry_run(target):
    root = pathlib.Path(__file__).resolve().parent.parent
    return subprocess.run(["make", "-n", "-C", str(root), target], capture_output=True,
                          text=True, check=True).stdout


def test_make_all_writes_the_table_under_build_and_leaves_the_readme():
    commands = _make_dry_run("all")
    assert "neuron_fabric.experiments.results --build build --out build/results.md" in commands
    assert "--readme" not in commands and "README.md" not in commands


def test_make_readme_results_rewrites_the_readme():
    assert "neuron_fabric.experiments.results --build build --readme README.md" in \
        _make_dry_run("readme-results")
