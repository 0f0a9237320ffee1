"""Spark settings: `--spark-conf` beats spark-defaults.conf, which beats partbuild's (local-only) defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from partbuild.api.cli import main
from partbuild.api.commands.serving import run, up
from partbuild.orchestrator.spark_conf import (
    DEFAULT_CONF,
    DRIVER_CONF,
    effective_conf,
    is_local_master,
    launcher_settings,
    parse_setting,
    read_properties,
    resolve_master,
)

SHUFFLE = "spark.sql.shuffle.partitions"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]"])
def test_local_masters_get_the_small_data_defaults(master: str) -> None:
    assert is_local_master(master)
    assert effective_conf(master, {}) == {"spark.app.name": "partbuild", **DRIVER_CONF, **DEFAULT_CONF}
    assert effective_conf(master, {SHUFFLE: "7"})[SHUFFLE] == "7"


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://k:443", "local-cluster[2,1,1024]"])
def test_cluster_masters_get_no_small_data_defaults(master: str) -> None:
    assert not is_local_master(master)
    named = {"spark.app.name": "partbuild", **DRIVER_CONF}
    assert effective_conf(master, {}) == named
    assert effective_conf(master, {SHUFFLE: "7"}, app_name="partbuild") == {**named, SHUFFLE: "7"}


def test_a_spark_connect_remote_gets_only_the_users_settings() -> None:
    assert effective_conf("sc://127.0.0.1:15002", {}) == {}
    assert effective_conf("sc://h:1", {SHUFFLE: "7"}, launcher_keys={"spark.ui.enabled"}) == {SHUFFLE: "7"}


def test_a_key_the_launcher_sets_keeps_its_value_unless_the_user_sets_it() -> None:
    launcher_keys = {SHUFFLE, "spark.ui.enabled", "spark.app.name"}
    conf = effective_conf("local[2]", {"spark.ui.enabled": "true"}, launcher_keys, app_name="partbuild-x")
    assert SHUFFLE not in conf and "spark.app.name" not in conf  # spark-defaults.conf's values stay
    assert conf["spark.ui.enabled"] == "true"  # the user's setting always goes in
    assert conf["spark.sql.session.timeZone"] == "UTC"


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("spark.sql.shuffle.partitions=7", (SHUFFLE, "7")),
        ("spark.executor.extraJavaOptions=-Da=b -Dc=d", ("spark.executor.extraJavaOptions", "-Da=b -Dc=d")),
        ("spark.foo=", ("spark.foo", "")),
    ],
)
def test_parse_setting(item: str, expected: tuple[str, str]) -> None:
    assert parse_setting(item) == expected


@pytest.mark.parametrize(
    ("item", "message"),
    [("noequals", "'noequals' is not KEY=VALUE"), ("=7", "'=7' has an empty key"), (" a=1", "whitespace")],
)
def test_parse_setting_refuses(item: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_setting(item)


def test_resolve_master_order() -> None:
    launcher = {"spark.master": "spark://from-defaults:7077"}
    assert resolve_master("local[1]", {"PARTBUILD_SPARK_MASTER": "yarn"}, launcher) == "local[1]"
    assert resolve_master(None, {"PARTBUILD_SPARK_MASTER": "yarn"}, launcher) == "yarn"
    assert resolve_master(None, {}, launcher) == "spark://from-defaults:7077"
    assert resolve_master(None, {}, {}) == "local[*]"


def test_read_properties_as_java_does() -> None:
    text = (
        "# a comment\n! another\n\n"
        "spark.a   1\n"
        "  spark.b=2\n"
        "spark.c : three  \n"
        "spark.d\\ e=4\n"
        "spark.f = one, \\\n    two\n"
        "spark.g=\\u00e9\\t\n"
        "spark.h\n"
    )
    assert read_properties(text) == {
        "spark.a": "1",
        "spark.b": "2",
        "spark.c": "three",
        "spark.d e": "4",
        "spark.f": "one, two",
        "spark.g": "é",  # Spark trims values, the escaped tab too
        "spark.h": "",
    }


def test_launcher_settings_files_and_submit_args(tmp_path: Path) -> None:
    home, conf_dir = tmp_path / "home", tmp_path / "confdir"
    (home / "conf").mkdir(parents=True)
    conf_dir.mkdir()
    (home / "conf" / "spark-defaults.conf").write_text("spark.from.home 1\n")
    (conf_dir / "spark-defaults.conf").write_text("spark.from.confdir 1\nspark.x file\n")
    (tmp_path / "extra.conf").write_text("spark.from.extra 1\n")

    assert launcher_settings({}, str(home)) == {"spark.from.home": "1"}
    from_conf_dir = launcher_settings({"SPARK_CONF_DIR": str(conf_dir)}, str(home))
    assert from_conf_dir == {"spark.from.confdir": "1", "spark.x": "file"}
    submit = f"--conf spark.x=arg --master yarn --properties-file {tmp_path / 'extra.conf'} pyspark-shell"
    env = {"SPARK_CONF_DIR": str(conf_dir), "PYSPARK_SUBMIT_ARGS": submit}
    # --properties-file replaces spark-defaults.conf, and --conf beats any file.
    assert launcher_settings(env, str(home)) == {"spark.from.extra": "1", "spark.x": "arg", "spark.master": "yarn"}
    env["PYSPARK_SUBMIT_ARGS"] = "--load-spark-defaults " + submit
    assert launcher_settings(env, str(home))["spark.from.confdir"] == "1"


# --- Through the command line ------------------------------------------------------------------------


@pytest.mark.parametrize("command", [run, up])
def test_spark_conf_option_parses_repeated_and_env_settings(command: object, monkeypatch: pytest.MonkeyPatch) -> None:
    def parsed(*args: str) -> tuple[tuple[str, str], ...]:
        with command.make_context("partbuild", ["--graph", "g.py", *args]) as ctx:  # type: ignore[attr-defined]
            return tuple(ctx.params["spark_conf"])

    assert parsed("--spark-conf", f"{SHUFFLE}=7", "--spark-conf", "spark.a=b=c") == ((SHUFFLE, "7"), ("spark.a", "b=c"))
    monkeypatch.setenv("PARTBUILD_SPARK_CONF", f"{SHUFFLE}=7\n  spark.ui.enabled=true spark.b=")
    assert parsed() == ((SHUFFLE, "7"), ("spark.ui.enabled", "true"), ("spark.b", ""))
    assert parsed("--spark-conf", "spark.c=1") == (("spark.c", "1"),)  # the command line replaces the env


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--spark-conf", "spark.sql.shuffle.partitions"], "", "'spark.sql.shuffle.partitions' is not KEY=VALUE"),
        (["--spark-conf", "=7"], "", "'=7' has an empty key"),
        ([], "spark.a=1 oops", "'oops' is not KEY=VALUE"),
    ],
)
@pytest.mark.parametrize("command", ["run", "up"])
def test_a_bad_spark_conf_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    args: list[str],
    env: str,
    message: str,
) -> None:
    monkeypatch.setenv("PARTBUILD_SPARK_CONF", env)
    with pytest.raises(SystemExit) as exited:
        main([command, "--graph", "examples/clicks/pipeline.py", *args])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.count("\n") == 1 and message in err and "--spark-conf" in err
