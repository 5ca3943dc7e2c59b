"""Remote attach: watch a live SGLang server through the surfaces it publishes.

- `remote_engine.RemoteEngine`: a read-only SnapshotSource for one server
  (`/server_info`, `/metrics`, KV-event stream).
- `fleet.Fleet`: several servers, per-worker and aggregate views, routing what-ifs.
- `event_stream.EventStream` + `event_mirror.PrefixMirror`: the prefix index mirrored from
  KV events, with gap replay and publisher-restart detection.
- `routing`: SGLang's page hashes and seed 003 figure 7's affinity-load objective.
- `loopback.LoopbackServer`: a real SGLang cache published on loopback (tests, demos).

Nothing here imports sglang or torch at module level; `loopback` imports them when built.
"""
