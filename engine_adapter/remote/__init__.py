"""Remote attach: watch a live SGLang server through the surfaces it publishes.

- `remote_engine.RemoteEngine`: a read-only SnapshotSource for one server
  (`/server_info`, `/metrics`, KV-event stream).
- `fleet.Fleet`: several servers, per-worker and aggregate views, routing what-ifs.
- `event_stream.EventStream` + `event_mirror.PrefixMirror`: the prefix index mirrored from
  KV events, with gap replay and publisher-restart detection.
- `routing`: SGLang's page hashes and seed 003 figure 7's affinity-load objective.

Nothing here imports sglang or torch. The loopback stand-in the tests use lives in
tests/support; a user's real server on a CPU is `kvctl sandbox` (kvctl/sandbox).
"""
