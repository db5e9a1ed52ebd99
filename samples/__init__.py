"""The sample order service and how it runs locally.

- `samples.app` — the three Lambda handlers that ``template.yaml`` deploys.
- `samples.demo` — ``python -m samples.demo`` (``make demo``): the narrated scenario, or one
  handler with one event file.
- `samples.local_app` (with `samples.watchers`) — the kit: the app on local tables, and what
  watches it (decisions, metrics, requests, the transcript).
- `samples.local_stack`, `samples.local_lambda`, `samples.local_server` — what the kit is built
  on: tables from the template, Lambda-shaped events and stream reading, the embedded server.
- `samples.scenario` (with `samples.outbox_steps`, `samples.tracing`, `samples.answers`) — the
  scenario's steps, which the demo and ``tests/functional`` run. Imports go one way: the steps
  use the kit, never the reverse (``tests/functional/test_sample_imports.py``).
"""
