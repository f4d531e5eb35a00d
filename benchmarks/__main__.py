"""Run the side-by-side benchmarks and print a Markdown report (raw samples go to benchmarks/results/)."""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks._options import Options

BENCHMARKS = {
    "happy_path": "benchmarks.happy_path",
    "frontends": "benchmarks.frontends",
    "sdks": "benchmarks.sdks",
    "dead_primary": "benchmarks.dead_primary",
    "outage": "benchmarks.outage",
    "per_test": "benchmarks.per_test",
    "agent": "benchmarks.agent_probe",
    "scenarios": "benchmarks.scenarios",
    "fleet": "benchmarks.fleet",
    "tail": "benchmarks.tail",
    "hedge_cost": "benchmarks.hedge_cost",
    "slow_primary": "benchmarks.slow_primary",
    "opcodes": "benchmarks.opcodes",
    "instructions": "benchmarks.instructions",
    "resolve": "benchmarks.resolve",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="name",
                        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--long", action="store_true", help="more rounds, longer runs (minutes)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--seconds", type=float, help="override each benchmark's time bound")
    parser.add_argument("--profile", action="store_true", help="add cProfile listings of our variants")
    parser.add_argument("--against", metavar="REF",
                        help="also run the package as it was at commit REF beside this tree's, paired "
                             "round by round (happy_path's in-process table)")
    parser.add_argument("--output", type=Path, help="also write the Markdown report to this file")
    parser.add_argument("--processes", type=int, default=1, metavar="N",
                        help="run each benchmark in N fresh processes, one after the other, and add "
                             "each variant's paired ratio in every process and their median (one run's "
                             "figure is one draw of the machine's state)")
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    names = args.names or list(BENCHMARKS)
    opts = Options(long=args.long, rounds=args.rounds, seconds=args.seconds, profile=args.profile, against=args.against)
    meta = h.machine()
    meta["command"] = "python -m benchmarks " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    meta["started"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    header = (
        f"## Benchmarks\n\nCommand: `{meta['command'].strip()}`  \n"
        f"Machine: {meta['cpus']} cores ({meta['cpu_model']}), Python {meta['python']}, "
        f"{meta['platform']}; load average at start {meta['loadavg_at_start'][0]:.2f}; "
        f"started {meta['started']}.\n"
    )
    print(header, flush=True)
    parts = [header]
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        print(f"... running {name}", file=sys.stderr, flush=True)
        if args.processes > 1:
            report = _in_processes(name, args, args.processes)
        else:
            report = module.run(opts)
        text = report.markdown()
        print(text, flush=True)
        parts.append(text)
        path = h.save(report, meta)
        print(f"... {name}: results in {path}", file=sys.stderr, flush=True)
    if args.output:
        args.output.write_text("\n".join(parts))
    return 0


def _in_processes(name: str, args: argparse.Namespace, count: int) -> h.Report:
    """``name`` run ``count`` times, each in a fresh ``python -m benchmarks`` process: every
    run's report, and before them the paired ratios of each variant across the runs."""
    started = time.monotonic()
    command = [sys.executable, "-m", "benchmarks", name]
    for flag, value in (("--rounds", args.rounds), ("--seconds", args.seconds), ("--against", args.against)):
        if value is not None:
            command += [flag, str(value)]
    for flag, on in (("--long", args.long), ("--profile", args.profile)):
        if on:
            command.append(flag)
    runs: list[dict[str, Any]] = []
    for i in range(count):
        print(f"... {name}: process {i + 1} of {count}", file=sys.stderr, flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=h.ROOT)
        runs.append(json.loads((h.RESULTS / f"{name}.json").read_text()))
    report = h.Report(name)
    table = across([run["data"] for run in runs])
    if table is not None:
        report.tables.append(table)
        shares = [run["data"]["against"] for run in runs if "against" in run["data"]]
        if shares:  # --against: what this tree adds to a request, as a share of what the other adds
            each = [share["added_share"] for share in shares]
            table.notes.append(
                f"Against {shares[0]['commit']}: this tree adds **{statistics.median(each):.2f}** of what that "
                f"tree adds to a request in process, the median over the processes "
                f"({', '.join(f'{x:.2f}' for x in each)})."
            )
            hot = [share["back_to_back_share"] for share in shares if "back_to_back_share" in share]
            if hot:  # (and back to back: see happy_path._back_to_back)
                table.notes.append(
                    f"Back to back (the transport alone, nothing of httpx.Client between two calls): "
                    f"**{statistics.median(hot):.2f}** ({', '.join(f'{x:.2f}' for x in hot)})."
                )
    report.extra += [f"\n#### {name}, process {i + 1} of {count}\n\n{run['markdown']}" for i, run in enumerate(runs)]
    report.data = {"processes": [run["data"] for run in runs]}
    report.seconds = time.monotonic() - started
    return report


def across(datas: list[dict[str, Any]]) -> h.Table | None:
    """The paired ratios of every variant in each run, and their median over the runs (None
    when the benchmark reports no paired ratio)."""
    variants = [k for k, v in datas[0].items() if isinstance(v, dict) and "wall_paired_ratio" in v]
    if not variants:
        return None
    table = h.Table(
        f"Across {len(datas)} processes: paired wall ratio vs the baseline, per process",
        ["variant", "**median over the processes**", "each process", "CPU ratio (paired), median"],
    )
    for variant in variants:
        walls = [d[variant]["wall_paired_ratio"] for d in datas if variant in d]
        cpus = [d[variant]["cpu_paired_ratio"] for d in datas if variant in d]
        table.rows.append([
            variant,
            f"**{statistics.median(walls):.3f}x**",
            ", ".join(f"{w:.3f}x" for w in walls),
            f"{statistics.median(cpus):.3f}x",
        ])
    table.notes.append(
        "Each process pairs its own rounds; the processes are not paired with each other, so their "
        "median is the figure to quote, and their spread says how far one run's figure can be trusted."
    )
    return table


if __name__ == "__main__":
    raise SystemExit(main())
