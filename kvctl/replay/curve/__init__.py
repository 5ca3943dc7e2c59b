"""Hit-rate curves: the token hit rate at every pool size from one stack-distance pass
(`kvctl replay TRACE --curve`). See docs/curve.md."""
