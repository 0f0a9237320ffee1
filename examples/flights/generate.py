"""Small raw flights, one CSV a day (`<root>/raw/flights/date=YYYY-MM-DD.csv`), shaped like the 2013 NYC flights.

Columns `carrier,flight,dep_delay` (minutes, may be negative). Deterministic from the seed; written through a
temporary name and renamed, so a reader never sees half a day.

    .venv/bin/python -m examples.flights.generate --root flights-data --month 2013-01 --per-day 20
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import random
from pathlib import Path

from examples.flights.pipeline import CARRIERS, days_of, raw_path


def write_day(root: Path, day: dt.date, rows: list[tuple[str, int, int]]) -> Path:
    """Write one day's flights; returns the file."""
    path = raw_path(root, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    with partial.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["carrier", "flight", "dep_delay"])
        writer.writerows(rows)
    partial.rename(path)
    return path


def generate(root: Path, month: dt.date, per_day: int, seed: int = 2013) -> list[Path]:
    """Every day of `month`, `per_day` flights each over `CARRIERS`; returns the files."""
    chance = random.Random(seed)
    written = []
    for day in days_of(month):
        rows = [
            (chance.choice(CARRIERS), chance.randrange(1, 2000), chance.randrange(-15, 120)) for _ in range(per_day)
        ]
        written.append(write_day(root, day, rows))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("flights-data"))
    parser.add_argument("--month", default="2013-01", help="YYYY-MM")
    parser.add_argument("--per-day", type=int, default=20)
    args = parser.parse_args()
    files = generate(args.root, dt.date.fromisoformat(f"{args.month}-01"), args.per_day)
    print(f"wrote {len(files)} days under {args.root / 'raw' / 'flights'}")


if __name__ == "__main__":
    main()
