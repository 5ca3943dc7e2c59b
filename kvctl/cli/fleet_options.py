"""The option that points `inspect`, `monitor` and `exporter` at a router's own metrics,
declared once (engine_adapter/remote/router_metrics.py says what is read)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

RouterMetrics = Annotated[Optional[str], typer.Option(
    "--router-metrics",
    help="With a router's --url: its Prometheus endpoint, http://HOST:PORT/metrics "
         "(sglang-router's --prometheus-port; default: port 29000 on the router's host, "
         "0.3.2's default). Unreachable: the router's figures read unknown.")]
