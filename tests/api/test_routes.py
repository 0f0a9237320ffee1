"""The routes derived from the declarations: each declared marker of ours is served as FastAPI's.

The declarations (`partbuild.api.surface`) carry our own markers, so that the HTTP client imports no
FastAPI; the document and the server's checks come from the FastAPI markers the routes map them to.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

import fastapi
from fastapi import params
from fastapi.routing import APIRoute

from partbuild.api.routes import resource_routers
from partbuild.api.surface import OPERATIONS
from partbuild.api.surface.common import Marker

BOUNDS = ("gt", "ge", "le", "min_length", "max_length")


def _markers(annotation: Any) -> list[Any]:
    markers = Marker | params.Param | params.Body
    return [extra for extra in getattr(annotation, "__metadata__", ()) if isinstance(extra, markers)]


def test_each_declared_marker_is_served_as_fastapis_of_the_same_name_and_arguments() -> None:
    routes = {route.name: route for router in resource_routers() for route in router.routes}
    served_markers = 0
    for name, operation in OPERATIONS.items():
        route = routes[name]
        assert isinstance(route, APIRoute)
        served = inspect.signature(route.endpoint).parameters
        for parameter in operation.parameters:
            [declared] = _markers(parameter.annotation)
            [marker] = _markers(served[parameter.name].annotation)
            assert type(marker) is getattr(fastapi.params, type(declared).__name__)
            assert marker.alias == declared.alias
            assert marker.description == declared.description
            assert marker.examples == (list(declared.examples) if declared.examples else None)
            bounds = {field.name: getattr(bound, field.name) for bound in marker.metadata for field in fields(bound)}
            assert bounds == {key: getattr(declared, key) for key in BOUNDS if getattr(declared, key) is not None}
            served_markers += 1
    assert served_markers > len(OPERATIONS)
