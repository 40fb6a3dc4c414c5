"""``python -m neuron_fabric.formal``: run the proofs and write the report (``make formal``)."""

import argparse
import concurrent.futures
import fnmatch
import functools
import json
import pathlib
import sys
import time

from .catalogue import all_proofs
from ..gen.tools import ToolError
from .runner import MODES, SOLVER, Outcome, prepare_proof, solve_proof, tool_environment


def report_markdown(outcomes, seconds):
    """The report's Markdown: a row a proof, then what failed."""
    lines = ["# Formal proofs", "",
             f"{len(outcomes)} runs with SymbiYosys (smtbmc, {SOLVER}) in {seconds:.0f} s; "
             f"{sum(o.ok for o in outcomes)} answered as expected.", "",
             "| group | proof | configuration | mode | depth | expected | result | s |",
             "|---|---|---|---|---|---|---|---:|"]
    for o in outcomes:
        p = o.proof
        lines.append(f"| {p.group} | `{p.name}` | {p.config} | {p.mode} | {o.depth_text} | "
                     f"{p.expect} | {o.status}{'' if o.ok else ' (unexpected)'} | "
                     f"{o.seconds:.0f} |")
    lines += ["", "Modes: " + "; ".join(f"{mode}, {text}" for mode, text in MODES.items())
              + ". A proof expected to fail runs on a planted bug and must find a "
                "counterexample.", ""]
    traces = [(o, t) for o in outcomes for t in o.traces]
    if traces:
        lines += ["Traces (VCD), for a counterexample or a reached cover:", ""]
        lines += [f"- `{o.proof.name}`: `{t}`" for o, t in traces]
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.formal",
                                     description="Run the formal proofs of the controller and "
                                                 "its blocks with SymbiYosys.")
    parser.add_argument("--out", default="build/formal", help="report folder (build/formal)")
    parser.add_argument("--quick", action="store_true",
                        help="only the test suite's subset (a few minutes)")
    parser.add_argument("--only", default="*",
                        help="a glob of proof names to run (default: every proof)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="proofs solved side by side (default 2, the cores of CI)")
    parser.add_argument("--list", action="store_true", help="list the proofs and stop")
    args = parser.parse_args(argv)

    proofs = [p for p in all_proofs() if (p.quick or not args.quick)
              and fnmatch.fnmatch(p.name, args.only)]
    if args.list:
        for p in proofs:
            print(f"{p.name:48} {p.group:14} {p.mode:6} depth {p.depth:3}  {p.config}")
        return 0
    if not proofs:
        print(f"formal: no proof matches --only {args.only!r}", file=sys.stderr)
        return 2
    try:
        env = tool_environment()
    except ToolError as error:
        print(f"formal: {error}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    outcomes = {}

    def report(proof, folder, future):
        try:
            outcome = future.result()
        except (OSError, ToolError) as error:   # a tool that could not run
            print(f"formal: {proof.name}: {error}", file=sys.stderr, flush=True)
            outcome = Outcome(proof, "ERROR", 0.0, [], folder)
        outcomes[proof.name] = outcome
        print(f"formal: [{len(outcomes)}/{len(proofs)}] {proof.name} ({proof.mode}, depth "
              f"{proof.depth}): {outcome.status}"
              f"{'' if outcome.ok else ' (expected ' + proof.expect + ')'} in "
              f"{outcome.seconds:.0f} s", flush=True)

    # Designs are elaborated here one at a time (a planted bug patches module globals);
    # SymbiYosys runs up to --jobs of them side by side, each reported as it ends. The
    # deepest start first: the longest runs, so the others fill the cores beside them.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for index, proof in enumerate(sorted(proofs, key=lambda p: -p.depth), 1):
            print(f"formal: elaborating {proof.name} ({index}/{len(proofs)})", flush=True)
            folder = prepare_proof(proof, out / proof.name)
            pool.submit(solve_proof, proof, folder, env=env).add_done_callback(
                functools.partial(report, proof, folder))
    outcomes = [outcomes[p.name] for p in proofs]
    seconds = time.monotonic() - start
    (out / "report.json").write_text(json.dumps(
        {"solver": SOLVER, "seconds": round(seconds, 1),
         "proofs": [o.as_dict() for o in outcomes]}, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(report_markdown(outcomes, seconds), encoding="utf-8")
    bad = [o.proof.name for o in outcomes if not o.ok]
    print(f"formal: {len(outcomes) - len(bad)} of {len(outcomes)} as expected in {seconds:.0f} s; "
          f"report in {out / 'report.md'} and {out / 'report.json'}")
    if bad:
        print(f"formal: not as expected: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
