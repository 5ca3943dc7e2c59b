"""`kvctl record`: a live server's traffic as a Mooncake trace (no token ids, no text)."""
