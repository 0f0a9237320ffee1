# Set-up and day-to-day commands. Every target installs what it needs into .venv first,
# so each one works on a fresh machine.
VENV ?= .venv
BIN := $(VENV)/bin
DB_FILE ?= partbuild.db
DB ?= sqlite:///$(DB_FILE)
GRAPH ?= examples/clicks/pipeline.py
export PARTBUILD_CLICKS_ROOT ?= $(CURDIR)/clicks-data
export PARTBUILD_CLICKS_DAYS ?= 28
PROTO_SRC := proto/partbuild/v1/events.proto
SPARK_CLASSES := $(VENV)/spark-classes.jsa
# Let Python keep the bytecode it compiles (see `bytecode`): pytest then keeps its rewritten test modules too,
# and each test worker collects in 8 s instead of 18 s.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: up run test test-fast lint bytecode proto proto-check bench screenshots clean

$(BIN)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## The main job: partbuild serving workload W1 on the embedded default (SQLite + local Spark):
## generates the raw clicks once, then runs the HTTP API and the orchestrator on 127.0.0.1:8000.
up: $(BIN)/.installed
	test -f $(PARTBUILD_CLICKS_ROOT)/raw/clicks/_SUCCESS || \
		$(BIN)/python -m examples.clicks.generate --root $(PARTBUILD_CLICKS_ROOT) --days $(PARTBUILD_CLICKS_DAYS) --rows 20000
	$(BIN)/partbuild up --db $(DB) --graph $(GRAPH) --warehouse warehouse --host 127.0.0.1 --port 8000

## A batch run of workload W1 on the embedded default (SQLite + local Spark). Generates the raw
## clicks, wants every weekly partition, builds them (dailies come as derivative wants), audits.
run: $(BIN)/.installed
	rm -rf $(DB_FILE) $(DB_FILE)-wal $(DB_FILE)-shm warehouse
	$(BIN)/python -m examples.clicks.generate --root $(PARTBUILD_CLICKS_ROOT) --days $(PARTBUILD_CLICKS_DAYS) --rows 20000
	$(BIN)/partbuild want --db $(DB) --graph $(GRAPH) --comment "W1 weekly clicks" \
		$$($(BIN)/python -m examples.clicks.pipeline weekly-refs)
	$(BIN)/partbuild run --db $(DB) --graph $(GRAPH) --warehouse warehouse --until-idle
	$(BIN)/partbuild replay --db $(DB) --verify

## The whole test suite, as CI runs it: the tests that start nothing on all cores, then the end-to-end ones
## (processes, Spark, Chromium) in two workers, a file at a time each: most of their time is spent waiting on
## the processes, JVMs and browsers they start, so two files at once nearly halve the phase on two cores.
test: $(BIN)/.installed bytecode proto-check
	$(MAKE) --no-print-directory -j2 lint $(SPARK_CLASSES)
	$(BIN)/python -m pytest -q -m "not process and not spark and not browser" -n auto --dist loadfile --durations=10
	$(BIN)/python -m pytest -q -m "process or spark or browser" -n 2 --dist loadfile --durations=20

## The tests that start no process, JVM or browser (PostgreSQL ones included): the check while changing code.
## The markers (pyproject.toml) say which tests are end to end; tests/conftest.py keeps them honest.
test-fast: $(BIN)/.installed bytecode lint
	$(BIN)/python -m pytest -q -m "not process and not spark and not browser" -n auto --dist loadfile --durations=10

## ruff, then mypy over state/, api/service/ and api/web/ and what they import ([tool.mypy] in pyproject.toml;
## the package names come from typecheck/partbuild/, symlinks to the top-level folders the install maps to
## `partbuild.*`).
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

## Compile the sources' bytecode. The install is editable, so nothing compiled them, and where the environment
## sets PYTHONDONTWRITEBYTECODE (CI's machines do) every process compiled what it imported from source again:
## about 0.3 s of CPU for each CLI call, server and worker a test starts. Quick when nothing changed.
bytecode: $(BIN)/.installed
	$(BIN)/python -m compileall -q -j 0 api examples migrations orchestrator proto state

## The classes a W1 build's Spark driver loads, recorded once per virtual environment (its JDK and Spark jars):
## every driver the tests start maps them instead of loading them (tests/kits/spark_cds.py). `test` records it
## beside the linters, which keep one core busy.
$(SPARK_CLASSES): $(BIN)/.installed tests/kits/spark_cds.py
	$(BIN)/python tests/kits/spark_cds.py $@ > $(VENV)/spark-classes.log 2>&1 || { tail -20 $(VENV)/spark-classes.log; exit 1; }
	@tail -1 $(VENV)/spark-classes.log

## Regenerate the committed protobuf code after editing $(PROTO_SRC).
proto: $(BIN)/.installed
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto $(PROTO_SRC)

## Fail when the committed generated code does not match $(PROTO_SRC).
proto-check: $(BIN)/.installed
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=$$tmp --pyi_out=$$tmp $(PROTO_SRC) && \
	diff -q $$tmp/partbuild/v1/events_pb2.py proto/partbuild/v1/events_pb2.py && \
	diff -q $$tmp/partbuild/v1/events_pb2.pyi proto/partbuild/v1/events_pb2.pyi || \
	{ echo "generated protobuf code is stale: run 'make proto' and commit it"; exit 1; }

bench: $(BIN)/.installed
	$(BIN)/python bench/replay_throughput.py
	$(BIN)/python bench/replay_throughput.py --heartbeats 10
	$(BIN)/python bench/append_throughput.py
	$(BIN)/python bench/state_memory.py
	$(BIN)/python bench/decide_throughput.py
	$(BIN)/python bench/idle_step.py
	$(BIN)/python bench/sharded_decide.py
	$(BIN)/python bench/w1_vs_plain.py
	$(BIN)/python bench/api_wants.py
	$(BIN)/python bench/api_lineage.py
	$(BIN)/python bench/web_pages.py
	$(BIN)/python bench/up_memory.py
	$(BIN)/python bench/bucketing.py
	$(BIN)/python bench/bucket_column.py
	$(BIN)/python bench/group_throughput.py
	$(BIN)/python bench/group_failover.py --count-conflicts
	$(BIN)/python bench/split_estimator.py
	$(BIN)/python bench/filesystem_scan.py
	$(BIN)/python bench/object_store_scan.py
	$(BIN)/python bench/scan_decision_latency.py
	$(BIN)/python bench/delivery.py
	$(BIN)/python bench/idle_cpu.py

## Retake the web UI's screenshots in docs/screenshots/ (a real W1 state, the distribution's Chromium).
screenshots: $(BIN)/.installed
	$(BIN)/python tests/kits/browser_screenshots.py

clean:
	rm -rf $(VENV) $(DB_FILE)* clicks-data warehouse
