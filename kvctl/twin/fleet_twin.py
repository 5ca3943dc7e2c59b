"""`kvctl replay TRACE --against ROUTER_URL --router POLICY`: the fleet twin, start to end.

    1. read the trace (every line validated)                     InputError: nothing sent
    2. the workers: the router's own listing (GET /workers), or --workers URL...
       each probed (/server_info: server_probe.py); they must share the settings the
       replay takes (one EngineConfig for every replica)        InputError: nothing sent
    3. POST /flush_cache on every worker: every cache starts empty
    4. drive the trace through the router (drive.py): every request carries its own rid;
       meanwhile read every worker's plugin: its timed steps (the clock) and its match
       receipts (which worker admitted which rid: kvctl/sandbox/served.py)
    5. the clock: --cost-model FILE (fitted on another drive: out of sample, every request
       judged), else the workers' steps completed before request k was sent, pooled and
       fitted, and TTFT judged on requests k..N (held out: holdout.py, --fit-share)
    6. predict: the fleet replay (kvctl/fleet) of the same records with the workers'
       settings, N replicas behind the mirror of the router's policy, the router's text
       being what the drive sent (one character per id, or decimal input_ids)
    7. compare, fleet and per replica. The real router orders its workers by random ids
       (docs/fleet-router.md), so replica j is matched to the worker that served most of
       the requests the replay routed to j (the permutation maximizing agreement, said so).

Which worker served a request is read per request (step 4), not inferred from counters.
A worker that dies mid-drive: its requests fail with no answer (kept as `error`, counted),
the drive goes on, the document says which; nothing measured is lost.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

from kvctl.errors import InputError
from kvctl.replay.engine_setup import Deployment
from kvctl.replay.mooncake import iter_records
from kvctl.replay.report import percentiles
from kvctl.twin import holdout
from kvctl.twin.clock import TwinClock, start_sampler
from kvctl.twin.drive import RequestForm, drive
from kvctl.twin.predict import _write_trace
from kvctl.twin.prompts import BlockVocabulary
from kvctl.twin.server_probe import probe
from kvctl.twin.settings_map import server_settings_to_replay_options
from kvctl.twin.twin_run import _flush, _load_model, clock_and_judged, clock_note, save_model

FORMS = ("text", "input_ids")
LATENCIES = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s")
POLL_S = 1.0


def discover_workers(router_url: str, timeout_s: float = 10.0) -> list[str]:
    """The worker URLs sglang-router lists at GET /workers. InputError: not a router (a
    plain SGLang server answers /server_info but has no /workers), or unreachable."""
    import json
    import urllib.error
    import urllib.request

    base = router_url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/workers", timeout=timeout_s) as reply:
            document = json.loads(reply.read())
    except urllib.error.HTTPError as err:
        if _is_server(base, timeout_s):
            raise InputError(f"{base} is an SGLang server, not a router (no /workers): drop "
                             "--router to check one server, or give --workers URL...") from None
        raise InputError(f"{base}/workers answered HTTP {err.code}: is it sglang-router? "
                         "give --workers URL...") from None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read {base}/workers ({err}); no request was sent") from None
    listed = document.get("workers", []) if isinstance(document, dict) else []
    urls = [str(w["url"]).rstrip("/") for w in listed if isinstance(w, dict) and w.get("url")]
    if not urls:
        raise InputError(f"{base} lists no worker at /workers; no request was sent")
    return urls


def is_router(url: str, timeout_s: float = 5.0) -> bool:
    """Whether `url` answers sglang-router's GET /workers with a worker list."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/workers", timeout=timeout_s) as reply:
            document = json.loads(reply.read())
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and isinstance(document.get("workers"), list)


def _is_server(base: str, timeout_s: float) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{base}/server_info", timeout=timeout_s) as reply:
            return reply.status == 200
    except OSError:
        return False


class _Watch:
    """Reads every worker's receipts (who served which rid) every POLL_S while the drive
    runs, so a bounded receipt log never wraps unread."""

    def __init__(self, served) -> None:
        self.served = served
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kvctl-fleet-served",
                                        daemon=True)

    def start(self) -> _Watch:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self._poll()

    def _poll(self) -> None:
        try:
            self.served.poll()
        except OSError as err:  # a worker that died: its receipts so far are kept
            self.error = f"a worker's plugin stopped answering ({err})"

    def finish(self) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()


def _pooled(samplers) -> SimpleNamespace:
    """The workers' finished step samplers seen as one (decide() reads .error and
    .collector.samples / .lost): the replicas are one configuration, so one step-cost model
    fits them all."""
    return SimpleNamespace(
        error=next((s.error for s in samplers if s.error), None),
        collector=SimpleNamespace(samples=[x for s in samplers for x in s.collector.samples],
                                  lost=sum(s.collector.lost for s in samplers)))


def run_fleet_twin(trace: str, router_url: str, *, router: str = "cache_aware",
                   router_options: dict | None = None, workers: list[str] | None = None,
                   form: str = "text", speedup: float = 1.0, limit: int | None = None,
                   vocab_size: int | None = None, seed: int = 0,
                   deployment: Deployment = Deployment(), cost_model: str | None = None,
                   save_cost_model: str | None = None, on_sent=None,
                   fit_share: float | None = None) -> dict:
    """Drive the fleet, predict it, compare (module docstring). `fit_share`: holdout.py."""
    from kvctl.fleet.routers.registry import make_policy
    from kvctl.sandbox.served import ServedBy, plugin_endpoints
    from kvctl.sandbox.tokenizer import render

    if not speedup > 0:
        raise InputError(f"--speedup must be > 0, got {speedup}")
    if form not in FORMS:
        raise InputError(f"--request-form must be one of {', '.join(FORMS)}, got {form!r}")
    if fit_share is not None and cost_model is not None:
        raise InputError("--fit-share splits a drive whose steps fit the clock; with "
                         "--cost-model nothing is fitted: drop --fit-share")
    share = holdout.check_fit_share(holdout.DEFAULT_FIT_SHARE if fit_share is None
                                    else fit_share)
    records = list(iter_records(trace, limit=limit))
    if not records:
        raise InputError(f"{trace}: the trace holds no requests")
    file_model = _load_model(cost_model)
    urls = [w.rstrip("/") for w in workers] if workers else discover_workers(router_url)
    options = dict(router_options or {})
    if router == "cache_aware" and form == "input_ids":
        options.setdefault("request_text", "input_ids")
    make_policy(router, replicas=len(urls), options=options)  # bad options: before sending
    profiles = [probe(u, vocab_size=vocab_size) for u in urls]
    settings = _common_settings(profiles)
    plugins = {p.url: plugin_endpoints(p.info) for p in profiles}
    if not all(plugins.values()):
        missing = ", ".join(u for u, p in plugins.items() if not p)
        raise InputError(f"no kvctl plugin on {missing}: the fleet twin reads which worker "
                         "served each request from every worker's plugin (docs/plugin.md)")
    for p in profiles:
        _flush(p.url)
    served = ServedBy(plugins)
    served.poll()  # start after what the logs already hold
    served.all_workers.clear()
    vocabulary = BlockVocabulary(profiles[0].vocab_size, records[0].block_tokens, seed=seed)
    samplers = []
    for p in profiles:
        sampler, _why = start_sampler(p.url, None)
        if sampler is not None:
            samplers.append(sampler)
    watch = _Watch(served).start()
    k = holdout.first_held_out(len(records), share) if file_model is None else None
    mark = (holdout.SendMark(k, lambda: [s.take_mark() for s in samplers])
            if k and samplers and len(samplers) == len(profiles) else None)
    prefix = f"kvctl-{uuid.uuid4().hex[:12]}-"
    request_form = RequestForm(text=render if form == "text" else None, rid_prefix=prefix,
                               keep_going=True)
    try:
        result = drive(router_url.rstrip("/"), records, vocabulary, speedup=speedup,
                       on_done=on_sent, form=request_form, metrics_urls=[p.url for p in profiles],
                       on_send=mark)
    finally:
        for sampler in samplers:
            sampler.finish()
        watch.finish()
    pooled = _pooled(samplers) if len(samplers) == len(profiles) else None
    marked = all(s.mark is not None for s in samplers)
    before = ([x for s in samplers for x in s.collector.samples[:s.mark]]
              if pooled is not None and mark is not None and marked else None)
    clock, judged = clock_and_judged(
        file_model, pooled, None if pooled else "a worker's kvctl plugin does not time steps",
        mark, len(records), before)
    saved = save_model(save_cost_model, pooled,
                       {"url": router_url, "workers": [p.url for p in profiles]})
    index = {p.url: j for j, p in enumerate(profiles)}
    worker_of = {m.line: index.get(served.worker_of(m.rid, poll=False))
                 for m in result.requests if m.rid is not None}
    prediction = _predict(records, profiles[0], settings, speedup, deployment, seed, clock,
                          router, options, len(profiles))
    document = _document(trace, router_url, profiles, result, worker_of, prediction, clock,
                         speedup, router, options, form, deployment, watch.error, served.lost,
                         judged)
    if save_cost_model is not None:
        document["saved_cost_model"] = saved
    return document


def _common_settings(profiles) -> dict:
    """The replay options every worker shares; InputError naming the first that differs."""
    first = server_settings_to_replay_options(profiles[0].info)
    for p in profiles[1:]:
        mine = server_settings_to_replay_options(p.info)
        for key, value in first.items():
            if mine.get(key) != value:
                raise InputError(f"workers differ in {key}: {profiles[0].url} has {value}, "
                                 f"{p.url} has {mine.get(key)}; the fleet replay takes one "
                                 "configuration for every replica")
    return first


def _predict(records, profile, options, speedup, deployment, seed, clock: TwinClock,
             router, router_options, replicas):
    from kvctl.fleet.runner import FleetSettings, prepare_fleet, run_fleet
    from kvctl.replay.runner import ReplaySettings

    # every line goes to the router (a refused one moves its counter and its tree, as the
    # real router's does); the replica refuses, at its door, what the server's rule refuses
    if all(profile.rejects(r.input_length, r.output_length) for r in records):
        return None, {}
    by_line = {i: r for i, r in enumerate(records, start=1)}
    with tempfile.TemporaryDirectory(prefix="kvctl-fleet-twin-") as folder:
        path = Path(folder) / "twin.jsonl"
        _write_trace(path, records, speedup)
        settings = ReplaySettings(workload=str(path), deployment=deployment, seed=seed,
                                  label="fleet twin", cost_model=clock.model, **options)
        fleet = FleetSettings(replicas=replicas, router=router, router_options=router_options,
                              vocab_size=profile.vocab_size, key_seed=seed)
        result = run_fleet(prepare_fleet(settings, fleet), refuse=lambda written: (
            profile.rejects(written.input_length, written.output_length)))
    lines = {f"mc-{i}": record.line for i, record in by_line.items()}
    return result, lines


def best_mapping(pairs: list[tuple[int, int]], replicas: int) -> tuple[int, ...]:
    """replica j -> worker mapping[j]: the permutation under which most (predicted replica,
    measured worker) pairs agree. Brute force up to 8 replicas, else greedy by counts."""
    counts = [[0] * replicas for _ in range(replicas)]
    for p, m in pairs:
        counts[p][m] += 1
    if replicas <= 8:
        return max(itertools.permutations(range(replicas)),
                   key=lambda perm: (sum(counts[j][perm[j]] for j in range(replicas)),
                                     [-abs(perm[j] - j) for j in range(replicas)]))
    mapping, taken = [-1] * replicas, set()
    cells = sorted(((counts[j][w], j, w) for j in range(replicas) for w in range(replicas)),
                   reverse=True)
    for _, j, w in cells:
        if mapping[j] < 0 and w not in taken:
            mapping[j] = w
            taken.add(w)
    return tuple(mapping)


def _document(trace, router_url, profiles, result, worker_of, prediction, clock, speedup,
              router, options, form, deployment, watch_error, lost,
              judged: holdout.Judged) -> dict:
    fleet_result, lines = prediction if prediction[0] is not None else (None, {})
    n = len(profiles)
    measured_all = list(result.requests)
    predicted = {}
    if fleet_result is not None:
        for o in fleet_result.outcomes:
            if o.rejected is None:
                predicted[lines[o.rid]] = o
    pairs = [(predicted[m.line].replica, worker_of[m.line]) for m in measured_all
             if m.line in predicted and worker_of.get(m.line) is not None]
    mapping = best_mapping(pairs, n)
    served = [m for m in measured_all if m.rejected is None and m.error is None]
    errors = [m for m in measured_all if m.error is not None]
    equal_hits = [(m.cached_tokens == predicted[m.line].hit_tokens) for m in served
                  if m.line in predicted]
    same_place = [mapping[predicted[m.line].replica] == worker_of.get(m.line) for m in served
                  if m.line in predicted]

    def measured_part(items):
        return _part(items, lambda m: m.cached_tokens, lambda m: m.ttft_s, lambda m: m.e2e_s)

    def predicted_part(items):
        return _part(items, lambda o: o.hit_tokens, lambda o: o.ttft_s, lambda o: o.e2e_s)

    replicas = []
    for j in range(n):
        worker = mapping[j]
        mine = [m for m in served if worker_of.get(m.line) == worker]
        ours = [o for o in predicted.values() if o.replica == j]
        replicas.append({"replica": j, "worker": profiles[worker].url,
                         "measured": measured_part(mine), "predicted": predicted_part(ours)})
    fleet_measured = measured_part(served)
    fleet_predicted = predicted_part(list(predicted.values()))
    if judged.lines is None:
        on_measured, on_predicted = fleet_measured, fleet_predicted
    else:  # the latencies are judged on the held-out requests only (holdout.py)
        on_measured = measured_part([m for m in served if m.line in judged.lines])
        on_predicted = predicted_part([o for line, o in predicted.items()
                                       if line in judged.lines])
    unattributed = sum(1 for m in served if worker_of.get(m.line) is None)
    notes = [clock_note(clock, deployment),
             "every worker's radix cache was flushed before the drive; the replay starts empty",
             "which worker served each request: its rid in the worker's kvctl plugin receipts",
             "replicas are matched to workers by the permutation under which most requests "
             f"land alike (the router orders workers by random ids): {list(mapping)}"]
    notes.append(f"TTFT ratios judged on {judged.on}; the table's TTFT columns and the hit "
                 "figures are over all requests")
    if clock.source == "fitted":
        notes.append(f"the clock was fitted on the {n} workers' steps pooled (their step "
                     "times add up across workers, so they exceed the span)")
    if errors:
        notes.append(f"{len(errors)} requests failed without an answer (a worker went away); "
                     "they are listed under `errors` and left out of both sides' figures")
    if watch_error:
        notes.append(watch_error)
    if lost:
        notes.append(f"{lost} receipts were dropped by a worker's bounded log before they "
                     "were read: some requests are unattributed")
    return {
        "trace": str(trace), "router_url": router_url, "speedup": speedup,
        "router": {"name": router, **{k: v for k, v in options.items()}},
        "request_form": form,
        "workers": [p.url for p in profiles],
        "fleet": {"measured": fleet_measured, "predicted": fleet_predicted},
        "replicas": replicas,
        "agreement": {
            "requests_compared": len(equal_hits),
            "hit_tokens_equal_share": (sum(equal_hits) / len(equal_hits)) if equal_hits else None,
            "same_replica_share": (sum(same_place) / len(same_place)) if same_place else None,
            "hit_rate_points": _points(fleet_predicted["hit_rate"], fleet_measured["hit_rate"]),
            "ttft_judged_on": judged.on, "ttft_out_of_sample": judged.out_of_sample,
            "judged": {"requests": on_measured["requests"],
                       "measured": {k: on_measured[k] for k in LATENCIES},
                       "predicted": {k: on_predicted[k] for k in LATENCIES}},
            "ttft_p50_ratio": _ratio(on_predicted["ttft_p50_s"], on_measured["ttft_p50_s"]),
            "ttft_p99_ratio": _ratio(on_predicted["ttft_p99_s"], on_measured["ttft_p99_s"]),
            "replica_mapping": list(mapping),
            "unattributed": unattributed,
        },
        "errors": [{"line": m.line, "error": m.error} for m in errors],
        "rejected": {"measured": [{"line": m.line, "reason": m.rejected} for m in measured_all
                                  if m.rejected is not None],
                     "predicted": ([{"line": lines[o.rid], "reason": o.rejected}
                                    for o in fleet_result.outcomes if o.rejected is not None]
                                   if fleet_result is not None else [])},
        "clock": clock.summary(),
        "notes": notes,
    }


def _part(items, hit, ttft, e2e) -> dict:
    hits = [hit(x) for x in items]
    known = all(h is not None for h in hits)
    prompt = sum(x.prompt_tokens for x in items)
    total = sum(hits) if known else None
    t, e = percentiles([ttft(x) for x in items if ttft(x) is not None]), \
        percentiles([e2e(x) for x in items if e2e(x) is not None])
    return {"requests": len(items), "prompt_tokens": prompt, "hit_tokens": total,
            "hit_rate": total / prompt if total is not None and prompt else None,
            "ttft_p50_s": t.p50, "ttft_p99_s": t.p99, "e2e_p50_s": e.p50, "e2e_p99_s": e.p99}


def _points(predicted, measured):
    return None if predicted is None or measured is None else (predicted - measured) * 100.0


def _ratio(predicted, measured):
    return None if not predicted or not measured else predicted / measured
