"""Run the side-by-side benchmarks and print a Markdown report (raw samples go to benchmarks/results/)."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from pathlib import Path

from benchmarks import _harness as h
from benchmarks._options import Options

BENCHMARKS = {
    "happy_path": "benchmarks.happy_path",
    "frontends": "benchmarks.frontends",
    "dead_primary": "benchmarks.dead_primary",
    "outage": "benchmarks.outage",
    "per_test": "benchmarks.per_test",
    "agent": "benchmarks.agent_probe",
    "scenarios": "benchmarks.scenarios",
    "fleet": "benchmarks.fleet",
    "tail": "benchmarks.tail",
    "slow_primary": "benchmarks.slow_primary",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="name",
                        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--long", action="store_true", help="more rounds, longer runs (minutes)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--seconds", type=float, help="override each benchmark's time bound")
    parser.add_argument("--profile", action="store_true", help="add cProfile listings of our variants")
    parser.add_argument("--output", type=Path, help="also write the Markdown report to this file")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    names = args.names or list(BENCHMARKS)
    opts = Options(long=args.long, rounds=args.rounds, seconds=args.seconds, profile=args.profile)
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
        report = module.run(opts)
        text = report.markdown()
        print(text, flush=True)
        parts.append(text)
        path = h.save(report, meta)
        print(f"... {name}: results in {path}", file=sys.stderr, flush=True)
    if args.output:
        args.output.write_text("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
