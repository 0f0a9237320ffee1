"""The conformance checks as pytest tests: `TestMine = conformance_suite(factory, cases)` in a test module."""

from __future__ import annotations

from collections.abc import Sequence

from partbuild.orchestrator.connectors.conformance import CHECKS, ConformanceCase, ConnectorFactory


def conformance_suite(factory: ConnectorFactory, cases: Sequence[ConformanceCase]) -> type:
    """A test class with one test per (check, case); assign it to a `Test*` name so pytest collects it."""
    import pytest  # a test-time dependency: imported only when a suite is built

    @pytest.mark.parametrize("case", list(cases), ids=[case.name for case in cases])
    @pytest.mark.parametrize("check", list(CHECKS), ids=list(CHECKS))
    def test_conformance(self: object, check: str, case: ConformanceCase) -> None:
        CHECKS[check](factory, case)

    return type("ConformanceSuite", (), {"test_conformance": test_conformance})
