"""``python -m benchmarks.scenarios [--small] [--only NAME ...] [--client KEY ...]``."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from benchmarks import _harness as h
from benchmarks._options import Options

from ._clients import clients
from ._main import SCENARIOS, run_all

CLIENTS = tuple(c.key for c in clients(cooldown=1.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scenarios", description=__doc__)
    parser.add_argument("--small", action="store_true", help="the CI sizes (about a minute in all)")
    parser.add_argument("--long", action="store_true", help="every duration doubled")
    parser.add_argument("--seconds", type=float, help="the flapping scenario's duration")
    parser.add_argument("--only", action="append", choices=SCENARIOS, default=[], metavar="NAME",
                        help=f"run only this scenario (repeatable): {', '.join(SCENARIOS)}")
    parser.add_argument("--client", action="append", choices=CLIENTS, default=[], metavar="KEY",
                        help=f"run only this client (repeatable): {', '.join(CLIENTS)}")
    parser.add_argument("--output", type=Path, help="also write the Markdown to this file")
    args = parser.parse_args(argv)
    meta = h.machine()
    meta["command"] = "python -m benchmarks.scenarios " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    meta["started"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    report = run_all(Options(long=args.long, seconds=args.seconds), small=args.small,
                     only=args.only, client_keys=args.client)  # fmt: skip
    header = (
        f"## Availability scenarios\n\nCommand: `{meta['command'].strip()}`  \n"
        f"Machine: {meta['cpus']} cores ({meta['cpu_model']}), Python {meta['python']}; "
        f"load average at start {meta['loadavg_at_start'][0]:.2f}; started {meta['started']}.\n"
    )
    text = header + "\n" + report.markdown()
    print(text, flush=True)
    path = h.save(report, meta)
    print(f"... results in {path}", file=sys.stderr, flush=True)
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
