"""The lineage graph of a wide fan-in in a real headless Chromium: it opens with its root in view (31 inputs stack
higher than the box), and a superseded source version is marked so, not shown as a plain Live input.

No Spark: the log is hand-made. 31 raw days observed, one of them observed again with another location (its first
instance stays Live but superseded), and a monthly built from the 30 current days and the old version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, manual, system

from browserkit import Tab, visit
from serverkit import ApiServer, graphless_api_server

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures

DAYS = [f"raw/date=2026-01-{day:02d}" for day in range(1, 32)]


@dataclass
class World:
    api: ApiServer
    monthly: str
    old_version: str


@pytest.fixture(scope="module")
def world(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder: Path = tmp_path_factory.mktemp("lineage-browser")
    with graphless_api_server(f"sqlite:///{folder / 'partbuild.db'}") as api:
        connector = system("connector")
        api.log.append(
            [
                envelope(pb.PartitionObserved(partition_ref=ref, location=f"/data/{ref}"), source=connector)
                for ref in DAYS
            ]
        )
        api.service.refresh()
        inputs = [api.service.state.canonical[ref] for ref in DAYS]
        api.log.append([envelope(pb.WantCreate(want_id="m", partition_refs=["monthly/2026-01"]), source=manual("ann"))])
        api.service.refresh()
        monthly = api.service.state.canonical["monthly/2026-01"]
        buffer = pb.JobRunBuffer(job_run_id="r1", job_label="monthly", instance_uuids=[monthly])
        api.log.append([envelope(buffer, source=system("orchestrator"))])
        # The first day is observed again (a new location) while the run reads the old one; then the run succeeds.
        again = pb.PartitionObserved(partition_ref=DAYS[0], location=f"/data/{DAYS[0]}/v2")
        success = pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=inputs)
        api.log.append([envelope(again, source=connector), envelope(success, source=from_job_run("r1"))])
        api.service.refresh()
        yield World(api, monthly, inputs[0])


def test_a_wide_fan_in_opens_with_its_root_in_view_and_marks_a_superseded_input(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.api.url)
    tab.page.set_viewport_size({"width": 1200, "height": 700})
    visit(tab, f"/instances/{world.monthly}?direction=upstream&depth=1")
    expect(tab.page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
    box = tab.page.locator("#lineage").bounding_box()
    root = tab.page.locator(f"#lineage-graph [data-testid=lineage-node][data-uuid='{world.monthly}']").bounding_box()
    assert box is not None and root is not None
    scrollable = tab.page.locator("#lineage").evaluate("(el) => el.scrollHeight > el.clientHeight")
    assert scrollable, "31 inputs should stack higher than the box (else this test shows nothing)"
    assert box["y"] <= root["y"] and root["y"] + root["height"] <= box["y"] + box["height"], (box, root)
    old = tab.page.locator(f"#lineage-graph [data-testid=lineage-node][data-uuid='{world.old_version}']")
    expect(old).to_have_attribute("data-superseded", "true")
    expect(old).to_contain_text("live (superseded)")
    others = tab.page.locator("#lineage-graph [data-testid=lineage-node][data-superseded=true]")
    expect(others).to_have_count(1)
