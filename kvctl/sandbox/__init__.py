"""`kvctl sandbox`: SGLang's own server on this machine's CPU, for trying every live command.

    config.py        SandboxConfig: the options a user passes through (page, pool, DP, policies)
    ports.py         free-port picking (blocks of dp_size ports) and the port-in-use check
    files.py         the files written to the sandbox's temp dir: the tiny model's config.json,
                     the CPU platform's dist-info (and the plugin's, when kvctl is not installed)
    cpu_platform.py  the out-of-tree CPU platform; imported only by the sandbox's server process
    launcher.py      SandboxServer: start `python -m sglang.launch_server`, wait, warm up, stop
    traffic.py       a built-in shared-prefix workload (`--traffic`) so the numbers move
    tokenizer.py     the tiny model's tokenizer: token id i is the one character chr(0x4E00 + i)
    fleet.py         SandboxFleet: N servers behind SGLang's router (`--replicas N --router P`)
    served.py        ServedBy: which worker served a request (its rid in the plugins' receipts)

Nothing here is active in a user's own server: the platform is registered only through a
dist-info written to the sandbox's temp directory and put on that one process's PYTHONPATH.
The e2e tests start their servers through SandboxServer (tests/e2e/sglang_server.py).
"""
