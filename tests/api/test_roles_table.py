"""The README's roles table says who may call what, exactly as the declared operations do (issue 35, item 6).

Every route a reader's "every read" does not cover (each write, each read that needs more than a
reader, and the open `/healthz`) is named in the table, in the row of the role it declares; the table
names no route the API does not have, and no route twice. That the server enforces each declared role
is tests/api/test_auth.py's part.
"""

from __future__ import annotations

import re
from pathlib import Path

from partbuild.api.surface import OPERATIONS
from partbuild.state.ops.roles import Role

README = Path(__file__).resolve().parents[2] / "README.md"
HEADER = "| role | may call |"
ROUTE = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s]*)`")
ROLE_CELLS = {"(none)": None, "`reader`": Role.READER, "`writer`": Role.WRITER, "`admin`": Role.ADMIN}
# Served outside the declared operations (api/routes.py `_add_metrics`), for a reader's token.
UNDECLARED = {("GET", "/metrics"): Role.READER}

Routes = dict[tuple[str, str], Role | None]


def table_rows(text: str) -> list[str]:
    """The rows of the README's roles table (after its header and separator)."""
    lines = text.splitlines()
    start = lines.index(HEADER)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def table_routes(text: str) -> Routes:
    """(method, path) -> role of every route the table names; each named once, in a row of a known role."""
    named: Routes = {}
    for row in table_rows(text):
        cell = row.split("|")[1].strip()
        assert cell in ROLE_CELLS, f"a row of an unknown role: {row[:80]}"
        for method, path in ROUTE.findall(row):
            assert (method, path) not in named, f"{method} {path} is in the roles table twice"
            named[(method, path)] = ROLE_CELLS[cell]
    return named


def declared_routes() -> Routes:
    """(method, path) -> role of every operation, paths as the README writes them (without /api/v1)."""
    routes: Routes = dict(UNDECLARED)
    for operation in OPERATIONS.values():
        path = operation.route.removeprefix("/api/v1").replace(":path}", "}")
        routes[(operation.method, path)] = operation.role
    return routes


def must_name(routes: Routes) -> Routes:
    """What the table names one by one: all but the reads a reader may make ("every read")."""
    return {key: role for key, role in routes.items() if not (key[0] == "GET" and role == Role.READER)}


def test_the_roles_table_names_every_write_with_its_role() -> None:
    """Each write (and each read beyond a reader, and /healthz) is in the row of its declared role."""
    named, declared = table_routes(README.read_text(encoding="utf-8")), declared_routes()
    wrong = [
        f"{method} {path}: declared {role.value if role else '(none)'}, the table says {named.get(key, 'nothing')}"
        for key in must_name(declared)
        if key not in named or named[key] != (role := declared[key])
        for method, path in [key]
    ]
    assert not wrong, "README roles table:\n" + "\n".join(wrong)
    # The writes issue 35 found missing: schedules paused, resumed and ticked by hand; checks run again.
    assert named[("POST", "/automation/schedules/{name}/trigger")] == Role.WRITER
    assert named[("POST", "/instances/{uuid}/checks")] == Role.WRITER


def test_the_roles_table_names_only_routes_that_exist_with_their_roles() -> None:
    """No route in the table the API does not have (a renamed or removed one), nor one with another role."""
    named, declared = table_routes(README.read_text(encoding="utf-8")), declared_routes()
    unknown = sorted(f"{method} {path}" for method, path in named if (method, path) not in declared)
    assert not unknown, f"the README roles table names routes the API does not have: {unknown}"
    other = sorted(f"{m} {p}" for (m, p), role in named.items() if declared[(m, p)] != role)
    assert not other, f"the README roles table gives these another role than they declare: {other}"


def test_the_comparison_sees_a_missing_and_an_unknown_route() -> None:
    """The checks above can fail: a table without a write, or with a route of nowhere, is caught."""
    before, table = README.read_text(encoding="utf-8").split(HEADER, 1)
    without = before + HEADER + table.replace("`POST /partitions/taint`, ", "", 1)
    assert ("POST", "/partitions/taint") in must_name(declared_routes())
    assert ("POST", "/partitions/taint") in table_routes(before + HEADER + table)
    assert ("POST", "/partitions/taint") not in table_routes(without)
    invented = before + HEADER + table.replace("`POST /partitions/taint`", "`POST /partitions/taints`", 1)
    assert ("POST", "/partitions/taints") in table_routes(invented)
    assert ("POST", "/partitions/taints") not in declared_routes()
