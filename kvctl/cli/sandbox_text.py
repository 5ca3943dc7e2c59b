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


def fleet_progress_line(fleet) -> str:
    c, r = fleet.config, fleet.router
    return (f"kvctl sandbox: starting {len(fleet.servers)} SGLang servers on this CPU (tiny "
            f"random-weight Llama, page {c.page_size}, pool {c.pool_tokens:,} tokens each) "
            f"behind SGLang's router ({r.policy}); this takes a few minutes")


def fleet_banner(fleet, seconds: float, *, traffic: bool) -> str:
    r, url = fleet.router, fleet.url
    lines = [
        f"kvctl sandbox: fleet ready in {seconds:.0f} s",
        f"  router     {url}   (sglang-router, {r.policy}: cache threshold "
        f"{r.cache_threshold:g}, balance abs {r.balance_abs_threshold} rel "
        f"{r.balance_rel_threshold:g})",
        f"  metrics    {fleet.metrics_url}   (the router's)",
        f"  log        {fleet.log_path}",
    ]
    for k, server in enumerate(fleet.servers):
        lines.append(f"  worker {k}   {server.url}   plugin {', '.join(server.plugin_urls)}")
    first = fleet.servers[0].url
    lines += [
        "",
        "Try, in another terminal:",
        f"  curl -s {url}/workers",
        f"  kvctl inspect --url {first}      (one worker; each has its own pool)",
        f"  kvctl monitor --url {first}",
        "",
        "Traffic: a shared-prefix workload is running through the router (text)." if traffic
        else f"No traffic yet: rerun with --traffic, or POST text to {url}/generate "
             "(one character per token id: chr(0x4E00 + id)).",
        "Ctrl-C stops the router and every server.",
    ]
    return "\n".join(lines)
