"""A real Prometheus server for the tests, and the PromQL found in ``deploy/``.

``PrometheusServer`` runs Debian's ``prometheus`` binary on a free port with a
temporary TSDB, using the project's ``prometheus.local.yml`` and rule files
with the intervals shortened (scrape and evaluation every second, no group
``interval``), and the worker as its only file-discovered target.

The expression helpers list every PromQL expression of the rule files and the
Grafana dashboard, so a test can evaluate each against live data.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.worker import free_port

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
DASHBOARD_DIR = ROOT / "deploy" / "grafana" / "dashboards"
JOB = "retrieval-scorer"
INSTALL_HINT = "install it with `make prometheus-install` (Debian's prometheus package)"


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; raises with the install hint if missing."""
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} is not on PATH: {INSTALL_HINT}")
    return path


@dataclass(frozen=True)
class Expression:
    """One PromQL expression and where it was found (for failure messages)."""

    origin: str
    promql: str
    kind: str
    """``record``, ``alert``, ``panel`` or ``variable``."""


def rule_expressions(rules_dir: Path = RULES_DIR) -> list[Expression]:
    """Every recording and alerting expression of the rule files."""
    found = []
    for path in sorted(rules_dir.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                kind = "record" if "record" in rule else "alert"
                origin = f"{path.name}: {group['name']}: {rule[kind]}"
                found.append(Expression(origin, rule["expr"].strip(), kind))
    return found


def dashboard_expressions(dashboard_dir: Path = DASHBOARD_DIR) -> list[Expression]:
    """Every panel target and query variable of the dashboards (variables unsubstituted)."""
    found = []
    for path in sorted(dashboard_dir.glob("*.json")):
        dashboard = json.loads(path.read_text())
        for variable in dashboard.get("templating", {}).get("list", []):
            if variable.get("type") == "query":
                query = variable["query"]
                promql = query["query"] if isinstance(query, dict) else query
                found.append(Expression(f"{path.name}: ${variable['name']}", promql, "variable"))
        for panel in _panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                origin = f"{path.name}: {panel['title']}: {target['refId']}"
                found.append(Expression(origin, target["expr"], "panel"))
    return found


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def substitute(promql: str, variables: Mapping[str, str]) -> str:
    """``promql`` with Grafana's ``$name`` variables replaced, longest names first."""
    for name in sorted(variables, key=len, reverse=True):
        promql = promql.replace(f"${name}", variables[name])
    return promql


_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")


def comparisons_as_bool(promql: str) -> str:
    """``promql`` with each top-level comparison turned into a ``bool`` one.

    ``a > b`` filters (empty while the condition is false); ``a > bool b``
    returns every matched series with 0 or 1, so an alert expression can be
    checked for series whatever its state. Comparisons inside brackets,
    braces (label matchers) and strings are left alone.
    """
    out = []
    depth = 0
    quote: str | None = None
    i = 0
    while i < len(promql):
        char = promql[i]
        if quote:
            out.append(char)
            if char == "\\":
                out.append(promql[i + 1])
                i += 1
            elif char == quote:
                quote = None
            i += 1
            continue
        if char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0:
            operator = next((op for op in _COMPARISONS if promql.startswith(op, i)), None)
            if operator and not promql[i + len(operator) :].lstrip().startswith("bool"):
                out.append(f"{operator} bool")
                i += len(operator)
                continue
        out.append(char)
        i += 1
    return "".join(out)


def label_values_call(promql: str) -> tuple[str, str] | None:
    """``(series selector, label)`` of a Grafana ``label_values(selector, label)`` query."""
    if not promql.startswith("label_values(") or not promql.endswith(")"):
        return None
    selector, _, label = promql[len("label_values(") : -1].rpartition(",")
    return selector.strip(), label.strip()


def write_targets(workdir: Path, targets: list[str]) -> None:
    """Set the file-discovered targets of a config made by ``install_config``
    (Prometheus notices the change within a second; an empty list scrapes nothing)."""
    groups = [{"targets": targets}] if targets else []
    path = workdir / "targets" / "test.json"
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(groups))
    staging.replace(path)


def install_config(workdir: Path, targets: list[str], interval: str = "1s") -> Path:
    """Write a runnable copy of ``prometheus.local.yml`` and the rules into ``workdir``.

    Changes, and nothing else: global scrape and evaluation intervals set to
    ``interval``, group intervals removed (every group evaluated at
    ``interval``), and ``targets`` as the only file-discovered targets.
    Returns the config file path.
    """
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.local.yml").read_text())
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    rules = workdir / "rules"
    rules.mkdir(parents=True)
    for path in sorted(RULES_DIR.glob("*.yml")):
        groups = yaml.safe_load(path.read_text())
        for group in groups["groups"]:
            group.pop("interval", None)
        (rules / path.name).write_text(yaml.safe_dump(groups, sort_keys=False))
    (workdir / "targets").mkdir()
    write_targets(workdir, targets)
    (job,) = config["scrape_configs"]
    assert job["job_name"] == JOB, f"prometheus.local.yml scrapes {job['job_name']}, not {JOB}"
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config_path


class QueryError(AssertionError):
    """Prometheus answered a query with an error (bad PromQL, or a failed evaluation)."""


@dataclass
class PrometheusServer:
    """A ``prometheus`` process on a free loopback port with its own TSDB in ``workdir``."""

    config: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "prometheus.log"

    def start(self, ready_timeout: float = 60.0) -> PrometheusServer:
        command = [
            binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1d",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.tail()}")
            if self._status("/-/ready") == 200:
                return self
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {ready_timeout}s:\n{self.tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful ``GET /api/v1/<path>``; raises ``QueryError`` otherwise."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            body = error.read()
            try:
                answer = json.loads(body)
            except ValueError:
                raise QueryError(f"HTTP {error.code} from {path}: {body[:200]!r}") from None
        if answer.get("status") != "success":
            raise QueryError(f"{answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant vector (or a scalar as one unlabelled sample) of ``promql``."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        if data["resultType"] == "vector":
            return data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        raise QueryError(f"{promql!r} gave a {data['resultType']}, not an instant vector")

    def values(self, promql: str, labels: tuple[str, ...] = ()) -> dict[tuple[str, ...], float]:
        """``promql`` as ``{label values: value}``."""
        return {
            tuple(sample["metric"].get(label, "") for label in labels): float(sample["value"][1])
            for sample in self.query(promql)
        }

    def query_range(
        self, promql: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        data = self.api(
            "query_range", query=promql, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}"
        )
        return data["result"]

    def label_values(self, label: str, selector: str) -> list[str]:
        return self.api(f"label/{label}/values", **{"match[]": selector})

    def wait_until(self, promql: str, expected: float, timeout: float = 60.0) -> None:
        """Wait until ``promql`` (one sample) equals ``expected`` in Prometheus."""
        deadline = time.monotonic() + timeout
        seen: object = None
        while time.monotonic() < deadline:
            samples = self.query(promql)
            seen = [sample["value"][1] for sample in samples]
            if len(samples) == 1 and float(samples[0]["value"][1]) == expected:
                return
            time.sleep(0.5)
        raise AssertionError(f"{promql} is {seen} after {timeout}s, expected {expected}")
