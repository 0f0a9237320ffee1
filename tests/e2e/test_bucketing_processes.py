"""The bucket function in another interpreter, with another hash seed, gives the same buckets."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from partbuild.state.rules.bucketing import bucket

from bucketkit import GITHUB_KEY, SPEC_VECTORS

pytestmark = pytest.mark.process


def test_stable_across_processes() -> None:
    """Another interpreter, with another hash seed, gives the same buckets."""
    cases = [(GITHUB_KEY, data, total) for data, total, _ in SPEC_VECTORS] + [("ключ", "données/é", 1000)]
    script = (
        "import json, sys\nfrom partbuild.state.rules.bucketing import bucket\n"
        "print(json.dumps([bucket(k, d, t) for k, d, t in json.load(sys.stdin)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert json.loads(done.stdout) == [bucket(k, d, t) for k, d, t in cases]
