"""The embedded engine: SGLang 0.5.23's real scheduler-side KV components driven in-process."""
