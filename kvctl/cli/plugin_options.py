"""The options that point a remote command at kvctl's SGLang plugin endpoint (issue 11),
declared once for `inspect`, `monitor`, `exporter` and `record`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

PluginToken = Annotated[Optional[str], typer.Option(
    "--plugin-token", envvar="KVCTL_PLUGIN_TOKEN", show_envvar=True,
    help="Bearer token of the plugin endpoint (the server's KVCTL_PLUGIN_TOKEN).")]
