"""A working set loaded again (issue 37: a working set refused for good no longer needs a restart by hand): what
`LiveState.load_again` costs against the process's first load, and whether the state it replaces is freed.

On the benchmarks' W1 log (built and projected once), in this process: a working set registered as `up`'s is
(`Registration`) loads from the store's rows (no checkpoint yet), projects, and saves a checkpoint, as a
running `up` does every 50,000 events; then it is loaded again `--rounds` times (as after a read refused for
good: the newest checkpoint, then the tail). Printed: each load's seconds, the resident memory after each,
the records held, and whether the digest (cold records from the rows) equals a whole state's.

    .venv/bin/python bench/working_set_loaded_again.py [--instances 300000] [--db FILE] [--rounds 3]

Target (no number in the issue): a load again no slower than a start from a checkpoint after a crash
(`bench/up_working_set.py`: it is that load) and well under the first load; resident memory after each load
again within 1.1x of after the first one (the replaced states freed, not kept beside the new one; the first
load's figure also holds what the whole state that projected the store left in this process); the same digest.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from _common import FULL_SIZE, machine, project_store, rss_bytes, w1_log

from partbuild.state.database import Database, Registration
from partbuild.state.fold.cold import ReadBackRefused
from partbuild.state.log.digest import state_digest
from partbuild.state.log.live import LiveState
from partbuild.state.store.checkpoints import keep_working_set, save_working_set
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.projector import Projector

MIB = 1024 * 1024
TARGET_RSS_RATIO = 1.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=FULL_SIZE // 10 * 3)
    parser.add_argument("--db", help="a W1 log to reuse (built there when empty)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp, w1_log(args.db, tmp, "w1.db", args.instances) as (url, _):
        project_store(url)
        with Database.open(url, auto_upgrade=True) as db:
            registration = Registration(db, working_set=True)
            began = time.perf_counter()
            live = LiveState(db.log, load=registration.load(db.changes))
            first_s, (first_rss, _) = time.perf_counter() - began, rss_bytes()
            projector = Projector(live, db.changes, writer=registration.holder)
            keep_working_set(live, projector)
            saved = save_working_set(live, projector)
            print(f"first load (from the rows): {first_s:.1f} s, resident {first_rss / MIB:,.0f} MiB", end="")
            print(f"; a checkpoint saved at seq {saved}")
            seconds, resident = [], []
            for _ in range(args.rounds):
                began = time.perf_counter()
                live.load_again(ReadBackRefused("the bench asks"), loads=live.loads)
                seconds.append(time.perf_counter() - began)
                resident.append(rss_bytes()[0])
                assert live.working is not None
                held, cold = live.working.sizes()
                print(
                    f"loaded again: {seconds[-1]:.1f} s, resident {resident[-1] / MIB:,.0f} MiB, "
                    f"{held:,} records held, {cold:,} in the rows"
                )
            assert live.working is not None
            whole = LiveState(db.log, use_snapshots=False)
            same = working_set_digest(live.working, db.changes.records) == state_digest(whole.state)
            registration.leave()
    ratio = max(resident) / resident[0]
    print(f"load again / first load: {max(seconds) / first_s:.2f}x; ", end="")
    print(f"resident, the most / after the first load again: {ratio:.2f}x")
    verdict = ratio <= TARGET_RSS_RATIO and max(seconds) < first_s and same
    print(
        f"same digest: {same}; target: resident <= {TARGET_RSS_RATIO}x, faster than the first load: "
        f"{'PASS' if verdict else 'MISS'}"
    )


if __name__ == "__main__":
    main()
