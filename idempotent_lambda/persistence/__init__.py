"""Persistence stores: where idempotency records live.

Stores are deliberately dumb: they persist records and enforce the conditional writes. Hashing,
JMESPath, caching and payload validation live in the engine. Import a store from its own module
(or from `idempotent_lambda`); this package imports none of them eagerly.
"""
