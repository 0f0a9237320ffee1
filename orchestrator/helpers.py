"""What acts beside an orchestrator's decisions, stepped once a loop step's events are appended.

Each helper is one `Helper`, registered in one list (`Orchestrator._helpers`): the loop steps every one,
sleeps no longer than the earliest time one of them waits for, and is not idle while one owes work. A new
helper is one entry there, not edits across the loop's constructor, step and idle check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Helper(Protocol):
    """Something that acts beside the decisions."""

    name: str

    def step(self, now_ms: int) -> bool:
        """Act, after the step's append; whether it did something (the loop then stays awake)."""
        ...

    def next_due_ms(self) -> int | None:
        """When it next needs a step, if it waits for a time (None: only when the log moves)."""
        ...

    def busy(self) -> bool:
        """Whether it owes work: the loop is not idle meanwhile."""
        ...


def _never() -> int | None:
    return None


def _idle() -> bool:
    return False


@dataclass(frozen=True)
class StepOf:
    """A helper made of functions: what it does each step, when it is due, whether it owes work."""

    name: str
    act: Callable[[int], bool]
    due: Callable[[], int | None] = _never
    owes: Callable[[], bool] = _idle

    def step(self, now_ms: int) -> bool:
        return self.act(now_ms)

    def next_due_ms(self) -> int | None:
        return self.due()

    def busy(self) -> bool:
        return self.owes()
