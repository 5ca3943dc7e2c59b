"""Traffic recording inside a serving process: salted chained block hashes per request,
buffered for a reader that polls (`kvctl record`). Nothing here stores a token id."""
