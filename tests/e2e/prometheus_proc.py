"""TEST-ONLY: a real Prometheus on loopback scraping given targets every second, and a
poller. Not a test module."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from e2e.sglang_server import free_port


def wait_for(predicate, timeout_s: float, what: str):
    """Poll `predicate` every 0.5 s until it returns something truthy; AssertionError after."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


class Prometheus:
    """`prometheus` scraping `targets` ("host:port") at 1 s; `value(expr)` -> float or None."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        self.workdir = workdir
        config = {"global": {"scrape_interval": "1s"},
                  "scrape_configs": [{"job_name": "kvctl", "static_configs": [{"targets": targets}]}]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.base = f"http://127.0.0.1:{free_port()}"

    def __enter__(self) -> Prometheus:
        self._log = open(self.workdir / "prometheus.log", "w")
        self._process = subprocess.Popen(
            ["prometheus", f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address={self.base.removeprefix('http://')}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(self._ready, 60, "prometheus /-/ready")
        return self

    def _ready(self) -> bool:
        if self._process.poll() is not None:
            raise AssertionError(f"prometheus exited: {(self.workdir / 'prometheus.log').read_text()}")
        try:
            return urllib.request.urlopen(f"{self.base}/-/ready", timeout=2).status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def query(self, expr: str) -> list:
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            document = json.loads(reply.read())
        assert document["status"] == "success", (expr, document)
        return document["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single sample `expr` yields now, or None while there is none."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=15)
        self._log.close()
