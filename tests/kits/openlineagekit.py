"""The vendored OpenLineage spec (tests/data/openlineage) as validators: `openlineage_errors` lists every way a
payload breaks the RunEvent schema or the schemas of the facets it carries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[1] / "data" / "openlineage"
CORE_ID = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
RUN_EVENT_URL = CORE_ID + "#/$defs/RunEvent"
# The facet files $ref older cores by URL; the vendored 2-0-2 core answers for them (see the README).
OLDER_CORE_IDS = (
    "https://openlineage.io/spec/1-0-1/OpenLineage.json",
    "https://openlineage.io/spec/1-0-2/OpenLineage.json",
)


def _registry() -> Registry:
    core = Resource.from_contents(json.loads((SCHEMAS / "OpenLineage.json").read_text()))
    resources = [(CORE_ID, core), *((uri, core) for uri in OLDER_CORE_IDS)]
    for path in (SCHEMAS / "facets").glob("*.json"):
        facet = Resource.from_contents(json.loads(path.read_text()))
        resources.append((facet.id(), facet))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def _validator(ref: str) -> Draft202012Validator:
    # FORMAT_CHECKER: "uuid" (runId) and "date-time" (eventTime) are asserted, not just annotations.
    return Draft202012Validator({"$ref": ref}, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER)


RUN_EVENT = _validator(RUN_EVENT_URL)
PARENT_FACET = _validator("https://openlineage.io/spec/1-0-1/ParentRunFacet.json")
ERROR_FACET = _validator("https://openlineage.io/spec/facets/1-0-0/ErrorMessageRunFacet.json")
VERSION_FACET = _validator("https://openlineage.io/spec/facets/1-0-0/DatasetVersionDatasetFacet.json")
ASSERTIONS_FACET = _validator("https://openlineage.io/spec/1-0-1/DataQualityAssertionsDatasetFacet.json")


def openlineage_errors(payload: dict[str, Any]) -> list[str]:
    """Every way `payload` breaks the RunEvent schema or the schemas of the facets it carries."""
    errors = [error.message for error in RUN_EVENT.iter_errors(payload)]
    run_facets = payload.get("run", {}).get("facets", {})
    for validator in (PARENT_FACET, ERROR_FACET):  # each checks only its own key ("parent", "errorMessage")
        errors += [error.message for error in validator.iter_errors(run_facets)]
    for dataset in payload.get("inputs", []) + payload.get("outputs", []):
        facets = dataset.get("facets", {})
        errors += [error.message for error in VERSION_FACET.iter_errors(facets)]
        # Each checks only its own key ("dataQualityAssertions"): an output's among its dataset facets,
        # an input's among its input facets.
        for each in (facets, dataset.get("inputFacets", {})):
            errors += [error.message for error in ASSERTIONS_FACET.iter_errors(each)]
    return errors
