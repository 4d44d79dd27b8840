"""A single-node Apache Kafka broker (KRaft) assembled from Maven Central jars.

No Docker and no release tarball: ``broker/pom.xml`` (package data) names the broker and
its logging backend, Maven copies their runtime jars once into a per-version
cache, and the broker runs as a detached JVM whose files live in
``<state_dir>/kafka``:

- ``server.properties``, ``log4j2.properties``: the rendered configuration;
- ``data/``: the KRaft log directory, formatted afresh by every start;
- ``broker.log``: the JVM's output (kept after ``stop_broker`` for post-mortems);
- ``broker.pid``: the JVM's process id;
- ``bootstrap``: the PLAINTEXT address, read by ``Settings.bootstrap_servers``;
- ``broker.json``: every address, and the SCRAM credentials with ``sasl=True``.

Every failure a user can meet raises ``LauncherError`` with a one-line message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from string import Template

from scorer.settings import BOOTSTRAP_FILE

KAFKA_VERSION = "4.1.2"
"""The broker version; keep it equal to ``kafka.version`` in broker/pom.xml."""

BROKER_FILES = Path(__file__).resolve().parent / "broker"
"""The broker's pom and config templates: package data, so a plain install has them."""
JVM_OPTIONS: tuple[str, ...] = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
"""Heap capped at 512 MiB: plenty for a test broker, small beside the workers."""

SASL_MECHANISM = "SCRAM-SHA-256"
SASL_USERNAME = "scorer"
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
HOST = "127.0.0.1"


class LauncherError(RuntimeError):
    """A broker could not be started, found or stopped; the message says why and what to do."""


@dataclass(frozen=True)
class SaslListener:
    """The SASL_PLAINTEXT listener of a broker started with ``sasl=True``."""

    bootstrap: str
    mechanism: str
    username: str
    password: str


@dataclass(frozen=True)
class BrokerInfo:
    """Where a running local broker serves, as recorded in ``broker.json``."""

    bootstrap: str
    controller: str
    pid: int
    version: str
    log_file: str
    sasl: SaslListener | None = None

    @classmethod
    def from_json(cls, text: str) -> BrokerInfo:
        fields = json.loads(text)
        sasl = fields.pop("sasl", None)
        return cls(**fields, sasl=SaslListener(**sasl) if sasl else None)


def broker_dir(state_dir: Path) -> Path:
    """The directory holding the local broker's files under ``state_dir``."""
    return state_dir / BOOTSTRAP_FILE.parent


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    """Where the jars of ``version`` are kept between runs (``$XDG_CACHE_HOME`` honoured)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "retrieval-scorer" / f"kafka-{version}" / "lib"


def ensure_jars(version: str = KAFKA_VERSION) -> Path:
    """Return the directory of the broker's jars, fetching them with Maven the first time.

    The download goes to a scratch directory that is renamed into place only
    when complete, so an interrupted fetch never leaves a half cache behind.
    """
    lib = cache_dir(version)
    if any(lib.glob("kafka_2.13-*.jar")):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LauncherError(
            f"mvn not found on PATH: install Maven (apt-get install maven) to fetch Kafka "
            f"{version} into {lib}"
        )
    pom = BROKER_FILES / "pom.xml"
    if not pom.is_file():
        raise LauncherError(f"{pom} is missing: reinstall retrieval-scorer (package data lost)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    scratch = lib.parent / f"lib.partial-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    command = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-Dkafka.version={version}",
        f"-DoutputDirectory={scratch}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        reason = _maven_error(done.stdout + done.stderr) or f"exit code {done.returncode}"
        raise LauncherError(
            f"mvn could not fetch Kafka {version} jars from Maven Central ({reason}); "
            "check network access and ~/.m2/settings.xml, then retry"
        )
    try:
        scratch.rename(lib)
    except OSError:  # another process finished the same download first
        shutil.rmtree(scratch, ignore_errors=True)
    return lib


def java_executable() -> str:
    """The ``java`` to run the broker with: 17 or newer, else ``LauncherError``."""
    java = shutil.which("java")
    if java is None:
        raise LauncherError(
            "java not found on PATH: Kafka needs Java 17+ (apt-get install openjdk-17-jre-headless)"
        )
    done = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)', done.stderr)
    if match is None or int(match.group(1)) < 17:
        found = match.group(1) if match else "unknown"
        raise LauncherError(f"{java} is Java {found}; Kafka {KAFKA_VERSION} needs Java 17+")
    return java


def broker_status(state_dir: Path) -> BrokerInfo | None:
    """The broker recorded under ``state_dir`` if its process is alive, else None."""
    info = _read_info(broker_dir(state_dir))
    if info is None or not _is_broker_process(info.pid):
        return None
    return info


def start_broker(
    state_dir: Path,
    *,
    sasl: bool = False,
    port: int | None = None,
    timeout: float = 90.0,
    version: str = KAFKA_VERSION,
) -> BrokerInfo:
    """Start a fresh broker for ``state_dir`` and return once it serves clients.

    ``port`` fixes the PLAINTEXT port; every other port (controller, SASL) is
    a free one. A broker already running for ``state_dir`` is returned as is
    when it has what was asked for (SASL), else it is an error. The log
    directory is formatted anew, so a start never sees old topics. On any
    failure the JVM is stopped again and the error carries the log's tail.
    ``version`` must be a 4.x release: the POM and log config are log4j2's.
    """
    running = broker_status(state_dir)
    if running is not None:
        if not running.bootstrap:
            raise LauncherError(
                f"a broker (pid {running.pid}) is still starting for {state_dir}: "
                "wait for it, or run `scorer kafka down`"
            )
        if sasl and running.sasl is None:
            raise LauncherError(
                f"a broker without SASL already runs at {running.bootstrap} (pid {running.pid}); "
                "run `scorer kafka down` first"
            )
        return running
    java = java_executable()
    lib = ensure_jars(version)
    home = broker_dir(state_dir).resolve()
    home.mkdir(parents=True, exist_ok=True)
    _forget(home)
    data = home / "data"
    shutil.rmtree(data, ignore_errors=True)

    plain_port, controller_port, *extra = _pick_ports(port, 3 if sasl else 2)
    listeners = [f"PLAINTEXT://{HOST}:{plain_port}"]
    if sasl:
        listeners.append(f"SASL_PLAINTEXT://{HOST}:{extra[0]}")
    properties = home / "server.properties"
    template = Template((BROKER_FILES / "server.properties").read_text())
    properties.write_text(
        template.substitute(
            controller_port=controller_port,
            listeners=",".join([*listeners, f"CONTROLLER://{HOST}:{controller_port}"]),
            advertised_listeners=",".join(listeners),
            log_dir=data,
        )
    )
    log4j = home / "log4j2.properties"
    shutil.copyfile(BROKER_FILES / "log4j2.properties", log4j)

    classpath = f"{lib}/*"
    credentials = None
    format_command = [
        java,
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        _cluster_id(),
        "-c",
        str(properties),
    ]
    if sasl:
        credentials = SaslListener(
            f"{HOST}:{extra[0]}", SASL_MECHANISM, SASL_USERNAME, secrets.token_urlsafe(18)
        )
        format_command += [
            "--add-scram",
            f"{SASL_MECHANISM}=[name={credentials.username},password={credentials.password}]",
        ]
    formatted = subprocess.run(format_command, capture_output=True, text=True, check=False)
    if formatted.returncode != 0:
        reason = _last_line(formatted.stdout + formatted.stderr)
        raise LauncherError(f"formatting the KRaft log dir {data} failed: {reason}")

    info = BrokerInfo(
        bootstrap=f"{HOST}:{plain_port}",
        controller=f"{HOST}:{controller_port}",
        pid=0,
        version=version,
        log_file=str(home / "broker.log"),
        sasl=credentials,
    )
    return _launch(java, lib, home, info, timeout, append_log=False)


def restart_broker(state_dir: Path, *, timeout: float = 90.0) -> BrokerInfo:
    """Start again, on the same ports and with its data, the broker that
    ``stop_broker(state_dir, keep_data=True)`` stopped (a broker restart, as in
    production). Topics, offsets and SCRAM users are kept; the log is appended to.
    """
    home = broker_dir(state_dir).resolve()
    running = broker_status(state_dir)
    if running is not None:
        raise LauncherError(f"a broker (pid {running.pid}) already runs for {state_dir}")
    info = _read_info(home)
    if info is None or not info.bootstrap or not (home / "data").is_dir():
        raise LauncherError(
            f"no stopped broker with its data in {home}: stop it with "
            "stop_broker(state_dir, keep_data=True) first, or start a fresh one"
        )
    return _launch(
        java_executable(), ensure_jars(info.version), home, info, timeout, append_log=True
    )


def _launch(
    java: str, lib: Path, home: Path, info: BrokerInfo, timeout: float, *, append_log: bool
) -> BrokerInfo:
    """Run the broker JVM on ``home``'s configuration; return ``info`` with its pid once
    it serves, after recording it (``broker.json``, ``broker.pid``, ``bootstrap``)."""
    log_file = Path(info.log_file)
    with log_file.open("ab" if append_log else "wb") as log:
        process = subprocess.Popen(
            [
                java,
                *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={home}",
                "-cp",
                f"{lib}/*",
                "kafka.Kafka",
                str(home / "server.properties"),
            ],
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (home / "broker.pid").write_text(f"{process.pid}\n")
    info = replace(info, pid=process.pid)
    try:
        _wait_until_serving(info, process, timeout)
    except BaseException:
        _terminate(process.pid, grace=10.0)
        _forget(home)
        raise
    info_file = home / "broker.json"
    info_file.touch(mode=0o600)
    info_file.write_text(json.dumps(asdict(info), indent=2) + "\n")
    (home / BOOTSTRAP_FILE.name).write_text(info.bootstrap + "\n")
    return info


def stop_broker(
    state_dir: Path, *, grace: float = 30.0, keep_data: bool = False
) -> BrokerInfo | None:
    """Stop the broker of ``state_dir`` and remove its log dir; return what was stopped.

    SIGTERM lets the broker shut down cleanly; after ``grace`` seconds it gets
    SIGKILL. Returns None when no broker was running (its files are still
    cleaned up). The log file stays for post-mortems. With ``keep_data`` the
    log dir and ``broker.json`` stay too, for ``restart_broker``.
    """
    home = broker_dir(state_dir)
    info = broker_status(state_dir)
    if info is not None:
        _terminate(info.pid, grace)
    if keep_data:
        (home / "broker.pid").unlink(missing_ok=True)
        (home / BOOTSTRAP_FILE.name).unlink(missing_ok=True)
        return info
    if home.is_dir():
        _forget(home)
        shutil.rmtree(home / "data", ignore_errors=True)
    return info


def log_tail(log_file: Path | str, lines: int = 15) -> str:
    """The last ``lines`` lines of a broker log ('' when there is none)."""
    try:
        text = Path(log_file).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_until_serving(info: BrokerInfo, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Return once the broker answers client metadata calls on every listener.

    The client port opens only when the broker is unfenced, so a TCP connect is
    awaited first (quietly); then a real aiokafka metadata call, with the SCRAM
    credentials on the SASL listener, proves that clients are served.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise LauncherError(
                f"the Kafka broker exited with code {process.returncode} while starting; "
                f"see {info.log_file}:\n{log_tail(info.log_file)}"
            )
        if _accepts_connections(info.bootstrap) and asyncio.run(_serves_clients(info)):
            return
        if time.monotonic() > deadline:
            raise LauncherError(
                f"the Kafka broker did not serve on {info.bootstrap} within {timeout:.0f}s; "
                f"see {info.log_file}:\n{log_tail(info.log_file)}"
            )
        time.sleep(0.2)


def _accepts_connections(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


async def _serves_clients(info: BrokerInfo) -> bool:
    from aiokafka import AIOKafkaClient

    targets: list[dict[str, object]] = [{"bootstrap_servers": info.bootstrap}]
    if info.sasl is not None:
        targets.append(
            {
                "bootstrap_servers": info.sasl.bootstrap,
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": info.sasl.mechanism,
                "sasl_plain_username": info.sasl.username,
                "sasl_plain_password": info.sasl.password,
            }
        )
    for options in targets:
        client = AIOKafkaClient(request_timeout_ms=5000, **options)
        try:
            await client.bootstrap()
            await client.fetch_all_metadata()
        except Exception:
            return False
        finally:
            await client.close()
    return True


def _pick_ports(fixed: int | None, count: int) -> list[int]:
    """``count`` distinct ports free on HOST now, the first one ``fixed`` when given.

    Every probe socket stays bound until all are chosen, so no port comes twice.
    """
    ports: list[int] = []
    with ExitStack() as held:
        if fixed is not None:
            probe = held.enter_context(socket.socket())
            try:
                probe.bind((HOST, fixed))
            except OSError as error:
                raise LauncherError(
                    f"port {fixed} on {HOST} is in use ({error.strerror}): choose another with "
                    "--port or stop what listens there"
                ) from None
            ports.append(fixed)
        while len(ports) < count:
            probe = held.enter_context(socket.socket())
            probe.bind((HOST, 0))
            ports.append(probe.getsockname()[1])
    return ports


def _cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):  # Kafka's tools reject ids that read like options
            return text


def _read_info(home: Path) -> BrokerInfo | None:
    try:
        return BrokerInfo.from_json((home / "broker.json").read_text())
    except (OSError, ValueError, TypeError):
        pid = _read_pid(home)
        if pid is None:
            return None
        # Started but not yet (or never) ready: known by its pid file only.
        return BrokerInfo("", "", pid, KAFKA_VERSION, str(home / "broker.log"))


def _read_pid(home: Path) -> int | None:
    try:
        return int((home / "broker.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _is_broker_process(pid: int) -> bool:
    """True when ``pid`` is alive and still a Kafka JVM (pids are reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and b"\0Z" not in _proc_state(pid)


def _proc_state(pid: int) -> bytes:
    """The state field of /proc/<pid>/stat, preceded by NUL ('\\0Z' for a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return b""
    return b"\0" + stat.rsplit(b")", 1)[-1].split()[0]


def _terminate(pid: int, grace: float) -> None:
    """SIGTERM the broker's process group, SIGKILL it after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not _is_broker_process(pid):
                return
            time.sleep(0.1)


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is our own child, so it leaves no zombie."""
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _forget(home: Path) -> None:
    """Remove the files that say a broker runs here."""
    for name in ("broker.pid", "broker.json", BOOTSTRAP_FILE.name):
        (home / name).unlink(missing_ok=True)


def _maven_error(output: str) -> str:
    """Maven's first ``[ERROR]`` line, which names the failure (the rest is advice)."""
    for line in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines():
        text = line.removeprefix("[ERROR]").strip()
        if line.startswith("[ERROR]") and text:
            return text
    return _last_line(output)


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""
