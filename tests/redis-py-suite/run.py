"""Runs redis-py's own test suite (from its PyPI source distribution) against a DMC
agent, and fails on any test that fails unexpectedly or that passes while listed as
an expected failure (the list only shrinks: remove what passes).

    python3 run.py --port PORT [--cache DIR] [-- PYTEST_ARGS...]

The source distribution of redis-py SUITE_VERSION is downloaded once into the cache
directory (`pip download`, from PyPI). Needs pytest, pytest-asyncio and pytest-timeout
(`.ci/run` installs them). `expected-failures.txt` beside this file lists the tests
that fail against DMC, each under a `# reason` header; the summary prints the counts.
"""
import argparse
import pathlib
import subprocess
import sys
import tarfile

SUITE_VERSION = "8.1.0"
HERE = pathlib.Path(__file__).resolve().parent
# The suite's files DMC runs: commands, pipelines and transactions, pub/sub, locks,
# scripts, encodings, connections, hash field expiry, MONITOR. Module, cluster, sentinel, TLS and
# asyncio files need servers or setups DMC does not offer.
FILES = [
    "tests/test_commands.py",
    "tests/test_pipeline.py",
    "tests/test_pubsub.py",
    "tests/test_lock.py",
    "tests/test_scripting.py",
    "tests/test_encoding.py",
    "tests/test_connection.py",
    "tests/test_hash.py",
    "tests/test_monitor.py",
]
MARKERS = "not redismod and not onlycluster and not ssl and not replica"


def suite(cache: pathlib.Path) -> pathlib.Path:
    """The unpacked source distribution, downloaded on first use."""
    root = cache / f"redis-{SUITE_VERSION}"
    if (root / "tests" / "conftest.py").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"redis-{SUITE_VERSION}.tar.gz"
    if not archive.exists():
        print(f"downloading redis-py {SUITE_VERSION}'s source distribution", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", f"redis=={SUITE_VERSION}", "-d", str(cache)],
            check=True,
        )
    with tarfile.open(archive) as tar:
        # Only plain files and directories inside the cache (Debian 12's Python 3.11.2
        # predates tarfile's extraction filters).
        for member in tar.getmembers():
            path = pathlib.PurePosixPath(member.name)
            if path.is_absolute() or ".." in path.parts or not (member.isfile() or member.isdir()):
                raise SystemExit(f"refusing to unpack {member.name!r}")
        tar.extractall(cache)
    return root


def expected_failures() -> dict:
    """Test id -> the reason it is expected to fail."""
    out, reason = {}, None
    for line in (HERE / "expected-failures.txt").read_text().splitlines():
        line = line.strip()
        if line.startswith("#"):
            reason = line.lstrip("# ")
        elif line:
            out[line] = reason or "no reason given"
    return out


class Verdict:
    """A pytest plugin: records which tests failed (in any phase) and which ran, and
    decides the exit status against the expected failures."""

    def __init__(self, expected: dict):
        self.expected = expected
        self.ran, self.failed = set(), set()

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            self.ran.add(report.nodeid)
        if report.failed:
            self.failed.add(report.nodeid)

    def pytest_sessionfinish(self, session, exitstatus):
        unexpected = sorted(self.failed - self.expected.keys())
        now_passing = sorted(t for t in self.expected if t in self.ran and t not in self.failed)
        passed = len(self.ran - self.failed)
        print(f"\nredis-py {SUITE_VERSION} suite against DMC: {passed} passed, "
              f"{len(self.failed)} failed ({len(self.failed) - len(unexpected)} expected, "
              f"listed with their reasons in expected-failures.txt)")
        for t in unexpected:
            print(f"UNEXPECTED FAILURE: {t}")
        for t in now_passing:
            print(f"NOW PASSES (remove it from expected-failures.txt): {t}")
        ok = not unexpected and not now_passing and exitstatus in (0, 1)
        session.exitstatus = 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cache", type=pathlib.Path,
                        default=HERE.parent.parent / "target" / "redis-py-suite")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    root = suite(args.cache)
    import os
    import pytest

    os.chdir(root)
    sys.path.insert(0, str(root))
    verdict = Verdict(expected_failures())
    return pytest.main(
        FILES + [f"--redis-url=redis://127.0.0.1:{args.port}", "-m", MARKERS, "-q",
                 "--tb=line", "-p", "no:cacheprovider", "-W", "ignore"] + args.pytest_args,
        plugins=[verdict],
    )


if __name__ == "__main__":
    sys.exit(main())
