"""The fold's digest does not depend on the process or on string hashing: generated logs replayed in
child processes with other PYTHONHASHSEEDs give the in-process digests."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partbuild.state.log.digest import state_digest

from stepkit import Entry, Step, materialize, replay, steps_strategy

pytestmark = pytest.mark.process

_SUBPROCESS_REPLAY = """
import pickle, sys
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.digest import state_digest
for log in pickle.load(sys.stdin.buffer):
    state = BuildState(strict=True)
    for seq, payload in log:
        state.apply_payload(seq, payload)
    print(state_digest(state))
"""


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(logs=st.lists(steps_strategy, min_size=4, max_size=4))
def test_digest_does_not_depend_on_the_process_or_string_hashing(logs: list[list[Step]]) -> None:
    """Replays in processes with different PYTHONHASHSEEDs give the in-process digests."""
    materialized = [[(e.seq, e.payload) for e in materialize(steps)] for steps in logs]
    expected = [state_digest(replay([Entry(s, p, None, None, ()) for s, p in log])) for log in materialized]
    for hash_seed in ("0", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS_REPLAY],
            input=pickle.dumps(materialized),
            capture_output=True,
            check=False,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode().split() == expected, f"PYTHONHASHSEED={hash_seed}"
