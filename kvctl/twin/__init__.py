"""`kvctl replay TRACE --against URL`: drive a live SGLang server with a trace, replay the
same trace with the server's own settings, and print predicted against measured."""
