"""What `kvctl sandbox` prints for people: where the server is and the commands to try."""

from __future__ import annotations


def progress_line(server) -> str:
    c = server.config
    return (f"kvctl sandbox: starting SGLang's server on this CPU (tiny random-weight Llama, "
            f"page {c.page_size}, pool {c.pool_tokens:,} tokens, DP {c.dp_size}, "
            f"{c.eviction}, {c.schedule_policy}); this takes a minute or two")


def banner(server, seconds: float, *, traffic: bool) -> str:
    c, url = server.config, server.url
    plugins = ", ".join(server.plugin_urls) or "off"
    lines = [
        f"kvctl sandbox: ready in {seconds:.0f} s",
        f"  server     {url}   (SGLang's own sglang.launch_server)",
        f"  plugin     {plugins}   (kvctl's plugin in the scheduler"
        + (f", one per DP rank)" if c.dp_size > 1 else ")"),
        f"  KV events  {server.events_endpoint}",
        f"  log        {server.log_path}",
        "",
        "Try, in another terminal:",
        f"  kvctl inspect --url {url}",
        f"  kvctl monitor --url {url}",
        f"  kvctl exporter --url {url} --port 9464      (then curl localhost:9464/metrics)",
    ]
    if c.record:
        lines.append(f"  kvctl record --url {url} --out trace.jsonl --duration 60s")
    else:
        lines.append("  kvctl record ...   (start the sandbox with --record first)")
    lines.append("")
    lines.append("Traffic: a shared-prefix workload is running." if traffic else
                 "No traffic yet: rerun with --traffic, or POST input_ids to "
                 f"{url}/generate.")
    lines.append("Ctrl-C stops the server.")
    return "\n".join(lines)
