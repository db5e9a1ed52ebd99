"""The sample order service and how it runs locally.

- `samples.app` — the three Lambda handlers that ``template.yaml`` deploys.
- `samples.demo` — ``python -m samples.demo`` (``make demo``): the narrated scenario, or one
  handler with one event file.
- `samples.local_stack`, `samples.local_lambda`, `samples.local_server`, `samples.scenario` — the
  pieces the demo and ``tests/functional`` share: tables from the template, Lambda-shaped events
  and stream reading, the embedded server, the scenario's steps.
"""
