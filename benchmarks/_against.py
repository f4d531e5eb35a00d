"""The library as it was at another commit, imported beside this tree's (``--against REF``).

A figure measured on one machine moves with the machine: the request path that added +18.3 µs
a request where issue 27 was filed added +19.8 µs on a later VM, in the same benchmark. What
does not move is the ratio of two trees measured side by side, in one process, round by round.
So a benchmark given ``--against REF`` also runs the package as it was at ``REF`` (a commit of
this repository) and pairs the two, and a target set against an old tree ("half the work") is
read the same on any machine.

The old tree is taken with ``git archive`` into a temporary directory and imported under a name
of its own, ``pytest_failover_at_<commit>``: its own absolute imports of ``pytest_failover`` are
renamed with it, so each tree imports only itself. The directory stays while the process runs
(the old tree may import a module late, and a traceback reads its sources) and goes when it
exits, or at once if the tree fails to import. Nothing of either tree is shared but the
process; the old one is driven through its public names only (``Pool``, ``FailoverTransport``),
as any other client would be.
"""

from __future__ import annotations

import atexit
import importlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

from benchmarks._harness import ROOT

PACKAGE = "pytest_failover"
_NAME = re.compile(rf"\b{PACKAGE}\b")


def commit_of(ref: str) -> str:
    """The commit ``ref`` names in this repository (12 hex digits); ``ValueError`` if none."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "--short=12", f"{ref}^{{commit}}"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise ValueError(f"--against {ref!r}: not a commit of the repository at {ROOT}")
    return done.stdout.strip()


def staged(ref: str) -> ModuleType:
    """``pytest_failover`` as it was at ``ref``, imported as ``pytest_failover_at_<commit>``
    (the same module again if it was imported already)."""
    commit = commit_of(ref)
    name = f"{PACKAGE}_at_{commit}"
    if name in sys.modules:
        return sys.modules[name]
    archive = subprocess.run(["git", "archive", "--format=tar", commit, PACKAGE], cwd=ROOT, capture_output=True, check=True)
    where = Path(tempfile.mkdtemp(prefix="failover-against-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    package = (where / PACKAGE).rename(where / name)
    for source in package.rglob("*.py"):
        source.write_text(_NAME.sub(name, source.read_text(encoding="utf-8")), encoding="utf-8")
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(name)
    except BaseException:
        shutil.rmtree(where, ignore_errors=True)
        raise
    finally:
        sys.path.remove(str(where))
