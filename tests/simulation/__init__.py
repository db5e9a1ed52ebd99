"""The simulator: generated histories of retried, crashed, delayed and concurrent invocations,
checked against the contract (issue 41; docs/reliability.md, "The simulator").

One seed drives everything. `program` draws a world (entry point, record format, client
settings, skews) and a list of steps (deliveries, redeliveries, time passing, faults on chosen
store requests); `world` runs them against the real library, a real botocore client and moto's
server, recording a `history.History`; `checker` tests the history against the invariants;
`shrink` reduces a failing program to a short one. `python -m tests.simulation` runs one seed,
the sweep or a soak.
"""
