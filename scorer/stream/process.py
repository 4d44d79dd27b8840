"""A ``scorer worker`` subprocess driven from Python: its environment from a
:class:`~scorer.settings.Settings`, its own web port and data directory, readiness,
its /metrics, a stop by signal. The integration tests and the benchmarks run
their workers through it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from scorer.settings import Settings


class WorkerNotReady(RuntimeError):
    """The worker exited, or did not answer /readyz, before the deadline."""


SCORER = str(Path(sys.executable).with_name("scorer"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker_env(settings: Settings, defaults: bool = True) -> dict[str, str]:
    """The environment that makes a ``scorer`` process read ``settings``; without
    ``defaults``, only the settings that differ from their defaults (for another
    checkout's scorer, which refuses a setting it predates)."""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers}
    for name, value in settings.model_dump(exclude_defaults=not defaults).items():
        if name == "kafka_bootstrap_servers" or value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, tuple | list):
            value = json.dumps(list(value))
        env[f"SCORER_{name.upper()}"] = str(value)
    return env


@dataclass
class Worker:
    """A ``scorer worker`` subprocess with its own web port and data directory."""

    settings: Settings
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    defaults: bool = True
    """Whether settings at their defaults are passed too (``worker_env``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"worker-{self.port}.log"

    def start(self, ready_timeout: float = 90.0) -> Worker:
        self.launch()
        self.wait_ready(ready_timeout)
        return self

    def launch(self, *args: str) -> Worker:
        """Start the process (``args`` added to ``scorer worker``) without waiting for it."""
        env = worker_env(self.settings, self.defaults)
        env["SCORER_WEB_PORT"] = str(self.port)
        env["SCORER_DATADIR"] = str(self.workdir / f"data-{self.port}")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [SCORER, "worker", "--loglevel", "info", *args],
                env=env,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise WorkerNotReady(
                    f"worker exited with {self.process.returncode}:\n{self.tail()}"
                )
            status, _ = self.get("/readyz")
            if status == 200:
                return
            time.sleep(0.3)
        raise WorkerNotReady(f"worker not ready after {timeout}s:\n{self.tail()}")

    def get(self, path: str) -> tuple[int, bytes]:
        """``(status, body)`` of a GET; status 0 when nothing answers."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:
            return 0, b""

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """One sample of the worker's /metrics (0.0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        _, body = self.get("/metrics")
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in (labels or {}).items()
                ):
                    return sample.value
        return 0.0

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
