"""`kvctl calibrate`: fit a step-cost model to a live server's measured scheduler steps."""
