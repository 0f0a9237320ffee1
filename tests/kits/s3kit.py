"""Object-store test kit: a real S3-compatible server (moto in server mode) in a child process, and a client.

The server is a separate process on a free local port, reached over HTTP by
boto3 exactly as a real endpoint would be: nothing in the client is mocked.
Credentials are dummies (moto accepts any) but are treated as secrets by the
tests: they must never show in a message, a repr or a log line.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from partbuild.orchestrator.connectors.object_store import ObjectStoreConnector
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.s3_config import ObjectStoreConfig

ACCESS_KEY = "AKIAPBTESTHUNTER2KEY"
SECRET_KEY = "pb-test-secret-access-key-hunter2-zzz"
SESSION_TOKEN = "pb-test-session-token-hunter2-yyy"
SECRETS = (ACCESS_KEY.encode(), SECRET_KEY.encode(), SESSION_TOKEN.encode())
START_TIMEOUT = 90.0  # seconds: moto imports a lot, and the test machine is often busy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """`python -m moto.server` on a free port; `stop()` kills it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not listen within {START_TIMEOUT}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def config(self, bucket: str, prefix: str = "", **options: Any) -> ObjectStoreConfig:
        return config_for(self.endpoint, bucket, prefix, **options)

    def client(self) -> Any:
        return self.config("unused-bucket").make_client()

    def connector(self, bucket: str, prefix: str = "", **options: Any) -> ObjectStoreConnector:
        return ObjectStoreConnector(self.config(bucket, prefix))


def config_for(endpoint: str, bucket: str, prefix: str = "", **options: Any) -> ObjectStoreConfig:
    return ObjectStoreConfig(
        bucket,
        prefix,
        endpoint_url=endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        session_token=SESSION_TOKEN,
        **options,
    )


def fill_bucket(client: Any, bucket: str, objects: dict[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
    """Create `bucket` (if needed) and put `objects` (key -> content)."""
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    for key, data in objects.items() if isinstance(objects, dict) else objects:
        client.put_object(Bucket=bucket, Key=key, Body=data)


def drain_keys(connector: ObjectStoreConnector, budgets: Budgets, key_range: KeyRange | None = None) -> list[bytes]:
    cursor, keys = Cursor(), []
    while (page := connector.fill_page(key_range or KeyRange(), cursor, budgets)) is not None:
        keys.extend(item.key.raw_bytes() for item in page.items)
        cursor = page.cursor
    return keys
