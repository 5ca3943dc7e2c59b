"""`kvctl monitor`: a Textual TUI that renders `Snapshot`s of a live KV cache.

Layout (posting-style): `app.py` holds the source and the polling worker, `screens/` the
dashboard, help and flush confirmation, `widgets/<area>/` one widget per file, each a
watcher of the typed reactive `snapshot`. The UI only ever sees `engine_adapter.snapshot`
objects; `make_app()` builds the app for both the CLI and the tests.
"""
