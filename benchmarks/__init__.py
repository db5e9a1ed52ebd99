"""Benchmarks of idempotent_lambda against Powertools for AWS Lambda's Idempotency utility.

Run ``python -m benchmarks.run`` (or ``make bench``); ``--help`` lists the options. Every suite
runs both libraries side by side in one process on the same events and reports ratios
(ours / Powertools). See ``docs/benchmarks.md`` for what is measured and the latest results.
"""
