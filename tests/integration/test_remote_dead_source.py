"""A dead or unreachable source is never shown as healthy (issue 16 section 1).

Three kinds of bad source, each a real HTTP endpoint on loopback: a port where nothing
listens; a URL answering with text that is not Prometheus (Python's own `http.server`, and a
relay with SGLang's real /server_info whose /metrics is an HTML page); and a server that
stops after the first scrape (a relay to SGLang's loopback stand-in, stopped mid-run). The
real `kvctl exporter` and `kvctl monitor --json` run as child processes against them, and
a real Prometheus scrapes the exporter while its source dies.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from remote_relay import ROOT, Relay, dead_url

from support.telemetry_fixtures import ExporterProcess

pytestmark = pytest.mark.integration

# All a down source exports (telemetry/collector.py DOWN_FAMILIES, plus kvctl_up).
DOWN = {"kvctl_up", "kvctl_snapshot_read_seconds", "kvctl_connected", "kvctl_alert_active",
        "kvctl_alerts_active"}
HTML = b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>\n"


def scrape(url: str) -> dict[str, list]:
    """The kvctl families of one scrape: name -> samples."""
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(body)
            if f.name.startswith("kvctl_")}


def value(families: dict[str, list], name: str) -> float:
    (sample,) = families[name]
    return sample.value


def assert_down(families: dict[str, list]) -> None:
    assert set(families) == DOWN
    assert (value(families, "kvctl_up"), value(families, "kvctl_connected")) == (0.0, 0.0)
    alerts = {s.labels["alert"] for s in families["kvctl_alert_active"]}
    assert alerts == {"remote_server_unreachable"}


@pytest.fixture
def html_site(tmp_path):
    """`python -m http.server` over a folder with an index.html: HTML or 404 for every path."""
    (tmp_path / "index.html").write_bytes(HTML)
    url = dead_url()
    port = url.rsplit(":", 1)[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", port, "--bind", "127.0.0.1"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "http.server did not start"
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_exporter_dead_url_exports_up_0_and_no_readings():
    """`kvctl exporter --url` at a port where nothing listens: kvctl_up 0, kvctl_connected 0,
    the unreachable alert, and no pool, free or U_KV family at all (not 0.0)."""
    with ExporterProcess("--url", dead_url(), "--interval", "0.2") as exporter:
        for _ in range(2):  # the first read and a later one (after the backoff) alike
            assert_down(scrape(exporter.url))
            time.sleep(0.6)
    assert exporter.returncode == 0, exporter.stderr


def test_exporter_url_answering_html_is_down(html_site):
    """A web server that is not SGLang (HTML and 404s everywhere) is a down source."""
    with ExporterProcess("--url", html_site, "--interval", "0.2") as exporter:
        assert_down(scrape(exporter.url))


def test_exporter_metrics_not_prometheus_is_down(loopback_demo_url):
    """SGLang's real /server_info but an HTML page at /metrics: down, nothing exported as 0."""
    relay = Relay(loopback_demo_url, metrics_body=HTML)
    try:
        with ExporterProcess("--url", relay.url, "--interval", "0.2") as exporter:
            assert_down(scrape(exporter.url))
    finally:
        relay.close()


def test_exporter_source_dies_mid_run_then_returns(loopback_demo_url):
    """The server stops after the first scrape: the next scrape says kvctl_up 0 and drops
    every reading (the last numbers are not re-served as current); once it answers again,
    the readings come back."""
    relay = Relay(loopback_demo_url)
    try:
        with ExporterProcess("--url", relay.url, "--interval", "0.2") as exporter:
            first = scrape(exporter.url)
            assert (value(first, "kvctl_up"), value(first, "kvctl_connected")) == (1.0, 1.0)
            assert value(first, "kvctl_pool_capacity_tokens") == 512.0  # the demo's pool
            relay.stop()
            assert_down(scrape(exporter.url))
            relay.start()
            deadline = time.monotonic() + 15
            while value(back := scrape(exporter.url), "kvctl_up") == 0.0:
                assert time.monotonic() < deadline, "the exporter did not reconnect"
                time.sleep(0.2)
            assert value(back, "kvctl_pool_capacity_tokens") == 512.0
    finally:
        relay.close()


def monitor_json(url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvctl", "monitor", "--url", url, "--json", "--refresh", "0.1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_monitor_json_dead_url_exits_1_with_one_line():
    """`kvctl monitor --url DEAD --json`: exit 1, one line naming the refusal, no JSON."""
    url = dead_url()
    result = monitor_json(url)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.strip() == (
        f"kvctl: error: no server answered ({url}/server_info: [Errno 111] Connection refused)"
    )


def test_monitor_json_html_site_exits_1_with_one_line(html_site):
    """A URL that answers HTML, not SGLang: exit 1 and one line, no placeholder snapshot."""
    result = monitor_json(html_site)
    assert (result.returncode, result.stdout) == (1, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: no server answered (")
    assert "server_info" in lines[0]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus not installed (apt-get install prometheus)")
def test_prometheus_sees_the_source_die(loopback_demo_url, tmp_path):
    """A real Prometheus scraping the exporter once a second, with kvctl's alert rules: while
    the server answers, kvctl_up is 1 and the pool capacity is 512; after it stops, kvctl_up
    is 0, the capacity series is gone (stale, not 0) and KvctlSourceDown is pending."""
    relay = Relay(loopback_demo_url)
    try:
        with ExporterProcess("--url", relay.url, "--interval", "0.2") as exporter, \
                _prometheus(tmp_path, exporter.instance) as query:
            _until(lambda: query("kvctl_pool_capacity_tokens") == ["512"], "a live scrape")
            assert query("kvctl_up") == ["1"]
            relay.stop()
            _until(lambda: query("kvctl_up") == ["0"], "kvctl_up 0")
            _until(lambda: query("kvctl_pool_capacity_tokens") == [], "the series to go stale")
            assert query("kvctl_connected") == ["0"]
            _until(lambda: query('ALERTS{alertname="KvctlSourceDown",alertstate="pending"}')
                   == ["1"], "KvctlSourceDown pending")
    finally:
        relay.close()


def _until(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@contextlib.contextmanager
def _prometheus(workdir: Path, target: str):
    """A Prometheus on loopback scraping `target` every second with alerts.yml; yields a
    query function returning the result values (strings)."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "dashboards" / "prometheus" / "alerts.yml")],
        "scrape_configs": [{"job_name": "kvctl", "static_configs": [{"targets": [target]}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    base = dead_url()
    process = subprocess.Popen(
        ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address={base.removeprefix('http://')}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def query(expr: str) -> list[str] | None:
        url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return [r["value"][1] for r in json.loads(response.read())["data"]["result"]]
        except OSError:
            return None  # not up yet

    try:
        _until(lambda: query("vector(1)") == ["1"], "prometheus to answer")
        yield query
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
