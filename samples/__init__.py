"""The sample app and its local runner (`python -m samples.demo`)."""
