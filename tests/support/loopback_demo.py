"""TEST-ONLY: run the loopback SGLang stand-in in a process of its own (needs torch and
sglang); users run `kvctl sandbox`, SGLang's real server, instead.

    PYTHONPATH=tests:. python -m support.loopback_demo [--page-size 4] [--pool-tokens 512]
        [--prompts 12] [--seed 0] [--prompt-out prompt.json] [--ready-file F]

Serves a deterministic agent-like workload (a shared system prompt and three conversations
that grow turn by turn), prints the URL and the `kvctl inspect` command,
and stays up until SIGINT or SIGTERM. `--ready-file` receives the URL once it serves.
`--prompt-out` writes a follow-up prompt of the first conversation as token ids.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import threading
from pathlib import Path

from support.loopback import LoopbackServer


def workload(server: LoopbackServer, *, prompts: int, seed: int) -> list[int]:
    """Serve `prompts` requests; returns the next turn of conversation 0 (for routing)."""
    rng = random.Random(seed)
    system = [rng.randrange(1, 1000) for _ in range(8 * server.page_size)]
    conversations = [list(system) for _ in range(3)]
    for index in range(prompts):
        conversation = conversations[index % len(conversations)]
        conversation += [rng.randrange(1, 1000) for _ in range(2 * server.page_size)]
        server.serve(conversation, output_tokens=server.page_size)
    return conversations[0] + [rng.randrange(1, 1000) for _ in range(server.page_size)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page-size", type=int, default=4)
    parser.add_argument("--pool-tokens", type=int, default=512)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--prompt-out", type=Path, default=None)
    parser.add_argument("--ready-file", type=Path, default=None, help="write the URL here when up")
    args = parser.parse_args(argv)
    server = LoopbackServer(
        page_size=args.page_size, pool_tokens=args.pool_tokens, model_dir=args.model_dir
    )
    try:
        follow_up = workload(server, prompts=args.prompts, seed=args.seed)
        if args.prompt_out is not None:
            args.prompt_out.write_text(json.dumps({"token_ids": follow_up}))
        print(f"SGLang loopback stand-in at {server.url} (KV events {server.kv_endpoint})")
        print(f"  kvctl inspect --url {server.url}", flush=True)
        if args.ready_file is not None:
            args.ready_file.write_text(server.url)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(0.5):  # a bare wait() would not see SIGTERM's handler run
                pass
        except KeyboardInterrupt:
            pass
    finally:
        server.close()


if __name__ == "__main__":
    main()
