"""Which Spark settings a session starts with: the user's, Spark's own launcher files, partbuild's defaults.

Precedence, highest first:

1. the user's `--spark-conf KEY=VALUE` (env PARTBUILD_SPARK_CONF);
2. what PySpark's launcher (`spark-submit`) reads by itself: `--conf` in PYSPARK_SUBMIT_ARGS, then
   `spark-defaults.conf` in SPARK_CONF_DIR, else in `$SPARK_HOME/conf` (or the file of `--properties-file`);
3. partbuild's defaults: `DRIVER_CONF` on any classic master, `DEFAULT_CONF` (small data) only on
   `local` / `local[...]`.

PySpark hands every builder setting to `spark-submit` as a `--conf`, which beats the launcher's files;
so a default is left out whenever the launcher already sets its key. Everything here is pure or
reads only files: testable without a JVM.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

# Small-data defaults, for `local[...]` only: W1-sized partitions are tiny, and 200 shuffle partitions
# would make every aggregation schedule 200 tasks. On a cluster the cluster's operators decide.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
}
# For every classic master (this process is the driver), still below anything the user set.
DRIVER_CONF: dict[str, str] = {
    # Progress bars on the console would interleave with the orchestrator's log lines.
    "spark.ui.showConsoleProgress": "false",
    # Timestamps mean the same on every machine, whatever each JVM's default zone.
    "spark.sql.session.timeZone": "UTC",
}
DEFAULT_MASTER = "local[*]"
DEFAULTS_FILE = "spark-defaults.conf"

_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def is_local_master(master: str) -> bool:
    """`local` or `local[...]` (not `local-cluster[...]`, which starts real executor JVMs)."""
    return _LOCAL_MASTER.fullmatch(master) is not None


def effective_conf(
    master: str, user: Mapping[str, str], launcher_keys: Collection[str] = (), app_name: str = "partbuild"
) -> dict[str, str]:
    """The settings to give the session builder for `master`.

    `user`: `--spark-conf`, always included. `launcher_keys`: keys spark-submit sets by itself
    (`launcher_settings`); a default for one of them (`app_name` included) is left out so the launcher's
    value stays. A Spark Connect remote (`sc://`) gets only the user's settings: the server has its own.
    """
    if master.startswith("sc://"):
        return dict(user)
    local = DEFAULT_CONF if is_local_master(master) else {}
    defaults = {"spark.app.name": app_name, **DRIVER_CONF, **local}
    kept = {key: value for key, value in defaults.items() if key not in launcher_keys and key not in user}
    return {**kept, **user}


def parse_setting(item: str) -> tuple[str, str]:
    """`KEY=VALUE` -> (KEY, VALUE), split at the first `=`; the value may be empty, the key not."""
    key, equals, value = item.partition("=")
    if not equals:
        raise ValueError(f"{item!r} is not KEY=VALUE")
    if not key:
        raise ValueError(f"{item!r} has an empty key")
    if any(char.isspace() for char in key):
        raise ValueError(f"{item!r}: the key contains whitespace")
    return key, value


def resolve_master(master: str | None, env: Mapping[str, str], launcher: Mapping[str, str]) -> str:
    """The master: the one given, else PARTBUILD_SPARK_MASTER, else `spark.master` of the launcher's files."""
    return master or env.get("PARTBUILD_SPARK_MASTER") or launcher.get("spark.master") or DEFAULT_MASTER


# --- What spark-submit reads by itself ----------------------------------------------------------------


def launcher_settings(env: Mapping[str, str], spark_home: str | None) -> dict[str, str]:
    """The settings spark-submit gives a PySpark driver before the builder's: files, then PYSPARK_SUBMIT_ARGS."""
    args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    confs, properties_file, load_defaults = _submit_args(args)
    files: list[Path] = []
    # As SparkSubmitArguments: --properties-file replaces spark-defaults.conf unless --load-spark-defaults.
    if properties_file is None or load_defaults:
        conf_dir = env.get("SPARK_CONF_DIR") or (str(Path(spark_home) / "conf") if spark_home else None)
        if conf_dir:
            files.append(Path(conf_dir) / DEFAULTS_FILE)
    if properties_file is not None:
        files.append(Path(properties_file))
    settings: dict[str, str] = {}
    for path in files:
        if path.is_file():
            settings.update(read_properties(path.read_text(encoding="utf-8", errors="replace")))
    return {**settings, **confs}


def _submit_args(args: list[str]) -> tuple[dict[str, str], str | None, bool]:
    """(--conf and --master settings, --properties-file, --load-spark-defaults) of spark-submit arguments."""
    confs: dict[str, str] = {}
    properties_file: str | None = None
    load_defaults = False
    pending: str | None = None
    for arg in args:
        if pending is not None:
            name, pending, value = pending, None, arg
        elif arg == "--load-spark-defaults":
            load_defaults = True
            continue
        elif arg in ("--conf", "-c", "--properties-file", "--master"):
            pending = arg
            continue
        elif arg.startswith(("--conf=", "--properties-file=", "--master=")):
            name, _, value = arg.partition("=")
        else:
            continue
        if name == "--properties-file":
            properties_file = value
        elif name == "--master":
            confs["spark.master"] = value
        elif "=" in value:
            key, _, setting = value.partition("=")
            confs[key] = setting
    return confs, properties_file, load_defaults


# --- java.util.Properties, as Spark loads spark-defaults.conf ------------------------------------------

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(text: str) -> dict[str, str]:
    """Keys and values of a Java properties file (`key value`, `key=value`, `key: value`), values trimmed."""
    settings: dict[str, str] = {}
    for line in _logical_lines(text):
        end = 0
        while end < len(line) and line[end] not in "=:" + _WHITESPACE:
            end += 2 if line[end] == "\\" else 1
        end = min(end, len(line))
        rest = line[end:].lstrip(_WHITESPACE)
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        settings[_unescape(line[:end])] = _unescape(rest.lstrip(_WHITESPACE)).strip()  # Spark trims values
    return settings


def _logical_lines(text: str) -> Iterator[str]:
    """Lines without comments and blank lines, a trailing odd run of backslashes joining the next line."""
    natural = iter(re.split(r"\r\n|\r|\n", text))
    for raw in natural:
        line = raw.lstrip(_WHITESPACE)
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1] + next(natural, "").lstrip(_WHITESPACE)
        yield line


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            escaped = text[index + 1]
            if escaped == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
                out.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            out.append(_ESCAPES.get(escaped, escaped))
            index += 2
            continue
        if char != "\\":  # a lone trailing backslash is dropped, as Java does
            out.append(char)
        index += 1
    return "".join(out)
