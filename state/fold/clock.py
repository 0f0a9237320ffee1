"""ClockTick: time passing with nothing else happening."""

from __future__ import annotations

from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState


def check_clock_tick(state: BuildState, seq: int, msg: pb.ClockTick, event: pb.Event) -> None:
    """Always a valid next step; there is nothing to resolve."""
    return None


def apply_clock_tick(state: BuildState, seq: int, plan: None, event: pb.Event) -> None:
    """Nothing: its only effect, moving the clock (and expiring wants), is BuildState.apply's."""
