"""What a plain install gets: the wheel `pip` builds from this checkout, with its
own build isolation (setuptools from PyPI), carries the compiled scoring kernel,
and a fresh environment that installs it scores with that kernel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scorer.settings import local_bootstrap

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def checkout_copy(into: Path) -> Path:
    """The checkout's files as git sees them (no build/, no module built in place)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the work tree is still listed
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def test_the_wheel_carries_the_compiled_kernel_and_a_plain_install_uses_it(tmp_path: Path):
    source = checkout_copy(tmp_path / "src")
    assert not list(source.rglob("_kernel*.so"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("retrieval_scorer-*.whl")
    # A compiled wheel is tagged for its interpreter and platform, not py3-none-any.
    assert "-cp311-cp311-linux_" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(n.startswith("scorer/core/_kernel.") and n.endswith(".so") for n in names)
    assert "scorer/core/_kernel.c" not in names  # the source stays out of the wheel
    # `scorer kafka up` renders these: without them a plain install cannot start a broker.
    for template in ("pom.xml", "server.properties", "log4j2.properties"):
        assert f"scorer/kafka/broker/{template}" in names

    # Installed alone into a directory put first on the path (its dependencies are
    # this environment's).
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True,
        timeout=300,
    )  # fmt: skip
    code = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "from scorer.core import metrics\n"
        "assert metrics.__file__.startswith(sys.argv[1]), metrics.__file__\n"
        "j = metrics.Judgments.from_qrels({'a': 3, 'b': 1, 'c': 0})\n"
        "print(metrics.KERNEL, metrics.score(['x', 'a', 'c', 'b'], j, 3))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,  # not the checkout: its scorer/ must not be imported
    )
    kernel, values = out.stdout.strip().split(" ", 1)
    assert kernel == "compiled"
    # rank 2 holds grade 3, rank 4 grade 1 (out of the top 3); nDCG over the ideal.
    ideal = 7.0 + 1.0 / 1.584962500721156
    assert values.startswith("MetricValues(recall_at_k=0.5, precision_at_k=0.3333333333333333")
    assert f"ndcg_at_10={(7.0 / 1.584962500721156 + 1.0 / 2.321928094887362) / ideal!r}" in values
    assert "mrr=0.5, hit_at_k=1, judged_at_k=0.6666666666666666" in values

    # The embedded broker, from the installed package alone: up, status, down.
    cli = (
        "import sys; sys.path[:0] = [sys.argv.pop(1)]\n"
        "import scorer\n"
        "assert scorer.__file__.startswith(sys.path[0]), scorer.__file__\n"
        "from scorer.cli.entry import main\n"
        "main()\n"
    )
    env = {**os.environ, "SCORER_STATE_DIR": str(tmp_path / "state")}

    def scorer_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", cli, str(target), "kafka", *args],
            capture_output=True, text=True, timeout=150, cwd=tmp_path, env=env, check=False,
        )  # fmt: skip

    try:
        up = scorer_cli("up", "--timeout", "120")
        assert up.returncode == 0, up.stdout + up.stderr
        status = scorer_cli("status")
        assert status.returncode == 0, status.stdout + status.stderr
        bootstrap = local_bootstrap(tmp_path / "state")
        assert bootstrap is not None and bootstrap.startswith("127.0.0.1:"), bootstrap
        assert bootstrap in status.stdout
    finally:
        down = scorer_cli("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert scorer_cli("status").returncode == 1
