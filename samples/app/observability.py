"""Logs and metrics with Powertools, the tools the functions' owners already run.

One Powertools ``Logger`` and one ``Metrics`` per process, configured from the environment
that ``template.yaml`` sets (``POWERTOOLS_SERVICE_NAME``, ``POWERTOOLS_METRICS_NAMESPACE``). The
library joins them through its interop: `idempotency_config` routes every idempotency decision
line through the Logger (``IdempotencyConfig(logger=...)``) and counts every decision on the
Metrics object (`PowertoolsMetricsHook`), so ``LeaseLost`` and ``CompleteFailed`` — which the
stack's alarms watch — are flushed with the function's own metrics by ``@metrics.log_metrics``.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics

from idempotent_lambda import IdempotencyConfig
from idempotent_lambda.metrics import PowertoolsMetricsHook

logger = Logger()
metrics = Metrics()


def idempotency_config(**options: Any) -> IdempotencyConfig:
    """Return an `IdempotencyConfig` with ``options`` that logs and counts through Powertools.

    The sample's tables are its own (no Powertools code reads them), so it uses the native
    format: exact replay, and large results offloaded to the bucket.
    """
    return IdempotencyConfig(
        record_format="native",
        logger=logger,
        decision_hook=PowertoolsMetricsHook(metrics),
        **options,
    )
