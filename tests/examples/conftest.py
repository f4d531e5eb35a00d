"""The files here are downstream test suites that ``tests/plugin`` runs through pytester.

They are not part of this project's own run: collecting them here would run each
fault case twice and clash with the module names pytester imports.
"""

collect_ignore_glob = ["example_*.py"]
