"""`IdempotencyTable`: the table idempotent_lambda's DynamoDB store expects, and its grants."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from idempotent_lambda_cdk._dashboard import build_dashboard
from idempotent_lambda_cdk._objects import granted_objects
from idempotent_lambda_cdk._outbox import (
    STREAM_ACTIONS,
    add_outbox_index,
    grant_outbox_items,
    grant_put_events,
    grant_sweep,
    reserve_sources,
    schedule_sweeper,
    stream_filter,
)

#: The folder of every function's offloaded results; the bucket's lifecycle rule expires it.
LARGE_RESULTS_ROOT = "idempotency/"

#: What `DynamoDBPersistenceLayer` calls on an invocation: claim and complete (PutItem), release
#: (DeleteItem), read while waiting (GetItem).
RECORD_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")
#: What a batch handler adds: one read of all a batch's keys before claiming any, and its
#: completions written up to 25 in one request.
BATCH_ACTIONS = ("dynamodb:BatchGetItem", "dynamodb:BatchWriteItem")
LARGE_RESULT_ACTIONS = ("s3:GetObject", "s3:PutObject")

#: The variable naming a granted function's key prefixes; the library checks it at decoration
#: (`idempotent_lambda._grant.GRANTED_KEY_PREFIXES_ENV`, tied by a test).
GRANTED_KEY_PREFIXES_ENV = "IDEMPOTENT_LAMBDA_GRANTED_KEY_PREFIXES"

#: A key prefix a grant can name: no IAM wildcard, no `#` (it ends the prefix in a key), no `%`
#: (quoting writes it; `granted_objects` is exact without one).
_KEY_PREFIX = re.compile(r"^[^*?#%\s]+$")
#: An EventBridge source an outbox publisher may be granted: 1 to 256 characters, no IAM
#: wildcard, not under `aws.` (EventBridge refuses those from PutEvents).
_SOURCE = re.compile(r"^(?!aws\.)[^*?\s]{1,256}$")


def large_result_prefix(key_prefix: str) -> str:
    """Return where a function of `key_prefix` offloads: `idempotency/<key_prefix>/`.

    Pass it to the store (`DynamoDBPersistenceLayer(large_result_prefix=...)`): the grant of
    `IdempotencyTable.grant_idempotency` covers the objects of `key_prefix` there, and no
    other prefix's, even one nested in the folder (`orders/eu` in `idempotency/orders/`).
    """
    return f"{LARGE_RESULTS_ROOT}{key_prefix}/"


class IdempotencyTable(Construct):
    """The idempotency table, and optionally the bucket for results too large for an item.

    The table has the store's default layout: partition key `id` (String), time to live on
    `expiration`, on-demand billing, point-in-time recovery, encryption with the AWS managed
    key and deletion protection. The bucket is private (every public access block, ACLs off),
    encrypted, refuses requests without TLS, keeps no versions, and expires objects under
    `idempotency/` once their records have expired.

    Args:
        scope: The parent construct.
        id: The construct id.
        table_name: A physical name; None lets CloudFormation name it.
        large_results: Also create the large-results bucket (`bucket`).
        record_expiry: The functions' `expires_after_seconds`: offloaded objects expire after
            it, in whole days rounded up (S3 counts days).
        removal_policy: What deleting the stack does to the table and bucket.
        outbox: The functions emit events with `idempotent_lambda.outbox.emit`: the table
            gets a stream (`NEW_IMAGE`) for `add_outbox_publisher`, and the sparse index
            `outbox-unpublished` of the items not yet published, which the sweeper reads. An
            emitting function needs no other grant: an event's item is a Put under its own
            key prefix.

    Attributes:
        table: The `aws_dynamodb.Table`.
        bucket: The `aws_s3.Bucket`, or None without `large_results`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        table_name: str | None = None,
        large_results: bool = False,
        record_expiry: Duration | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        outbox: bool = False,
    ) -> None:
        super().__init__(scope, id)
        self._granted: dict[str, list[str]] = {}
        #: What `add_dashboard` charts: batch functions and failure queues, sweepers (by path).
        self._batch_functions: dict[str, lambda_.IFunction] = {}
        self._failure_queues: dict[str, sqs.IQueue] = {}
        self._sweepers: dict[str, lambda_.IFunction] = {}
        self.table = dynamodb.Table(
            self,
            "Table",
            table_name=table_name,
            partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="expiration",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            deletion_protection=removal_policy == RemovalPolicy.RETAIN,
            removal_policy=removal_policy,
            stream=dynamodb.StreamViewType.NEW_IMAGE if outbox else None,
        )
        if outbox:
            add_outbox_index(self.table)
        self._sources: dict[str, set[str]] = {}
        self.bucket: s3.Bucket | None = None
        if large_results:
            expiry = Duration.hours(1) if record_expiry is None else record_expiry
            self.bucket = s3.Bucket(
                self,
                "LargeResults",
                encryption=s3.BucketEncryption.S3_MANAGED,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
                enforce_ssl=True,
                versioned=False,
                removal_policy=removal_policy,
                lifecycle_rules=[
                    s3.LifecycleRule(
                        id="ExpireIdempotencyResults",
                        prefix=LARGE_RESULTS_ROOT,
                        expiration=Duration.days(math.ceil(expiry.to_seconds() / 86400) or 1),
                        abort_incomplete_multipart_upload_after=Duration.days(1),
                    )
                ],
            )

    def grant_idempotency(
        self,
        grantee: iam.IGrantable,
        *,
        key_prefix: str,
        batch: bool = False,
        offload: bool = False,
    ) -> iam.Grant:
        """Let `grantee` keep its idempotency records, and only those of `key_prefix`.

        Grants exactly what the store calls (GetItem, PutItem, DeleteItem; BatchGetItem too
        with `batch`) on items whose key starts with `{key_prefix}#`, the key of every
        record of a function decorated with that `key_prefix`; and, with `offload`,
        s3:GetObject and s3:PutObject on the objects of `key_prefix` under its
        `large_result_prefix` (`idempotency/orders/orders%23*` for `orders`: the folder of
        `orders/eu` sits inside, its objects do not match). Sets
        `IDEMPOTENT_LAMBDA_GRANTED_KEY_PREFIXES` on a granted `aws_lambda.Function`, so the
        library refuses, at import, a key prefix the function was not granted.

        Args:
            grantee: The function (or role) that runs the decorated handler.
            key_prefix: The `key_prefix` its decorator or adapter is given.
            batch: The handler is a batch handler (`idempotent_sqs_handler`,
                `idempotent_stream_handler`): it reads a batch's keys at once.
            offload: The function offloads large results to the bucket (its store has
                `large_result_bucket` and `record_format="native"`; the default format never
                offloads). Needs `large_results=True`.

        Returns:
            The grant (the table's, combined with the bucket's).

        Raises:
            ValueError: `key_prefix` is empty or holds `*`, `?`, `#`, `%` or whitespace, or
                `offload` is asked of a table without the bucket.
        """
        if not _KEY_PREFIX.match(key_prefix):
            raise ValueError(f"key_prefix {key_prefix!r} cannot name a key prefix in a grant")
        self._name_granted_prefix(grantee, key_prefix)
        if batch and isinstance(grantee, lambda_.Function):
            self._batch_functions[grantee.node.path] = grantee
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=[*RECORD_ACTIONS, *(BATCH_ACTIONS if batch else ())],
            resource_arns=[self.table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{key_prefix}#*"]}},
        )
        if offload and self.bucket is None:
            raise ValueError("offload=True needs IdempotencyTable(..., large_results=True)")
        if not offload or self.bucket is None:
            return grant
        objects = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(LARGE_RESULT_ACTIONS),
            resource_arns=[
                self.bucket.arn_for_objects(
                    granted_objects(large_result_prefix(key_prefix), key_prefix)
                )
            ],
        )
        return grant.combine(objects)

    def _name_granted_prefix(self, grantee: iam.IGrantable, key_prefix: str) -> None:
        """Tell a granted function its key prefixes, so the library refuses any other one."""
        if not isinstance(grantee, lambda_.Function):
            return  # a role: the functions that assume it are not known here
        prefixes = self._granted.setdefault(grantee.node.path, [])
        if key_prefix not in prefixes:
            prefixes.append(key_prefix)
        grantee.add_environment(GRANTED_KEY_PREFIXES_ENV, ",".join(prefixes))

    def add_outbox_publisher(
        self,
        publisher: lambda_.Function,
        *,
        key_prefixes: Sequence[str],
        event_bus: events.IEventBus,
        sources: Sequence[str],
        on_failure: sqs.IQueue | None = None,
        retry_attempts: int = 10,
        max_record_age: Duration | None = None,
        sweeper: lambda_.Function | None = None,
        sweep_every: Duration | None = None,
    ) -> lambda_.EventSourceMapping:
        """Run `publisher` (its handler `outbox.publish_handler(store, key_prefixes=...)`) on
        the table's stream, and `sweeper` (`outbox.sweep_handler(store, key_prefixes=...)`)
        on a schedule.

        The mapping delivers the INSERTs of the outbox items of `key_prefixes` only (a filter
        on their key and their `outbox_id`): the items the publisher's grant lets it read, so
        another function's item never fails its batch. One batch per shard at a time; the
        handler's `batchItemFailures` are taken; a failed batch is split to find the bad
        record, retried `retry_attempts` times within `max_record_age` (6 hours by default),
        then reported to `on_failure`. The sweeper, every `sweep_every` (5 minutes), publishes
        what the stream did not bring: items given up on, or whose records the stream no longer
        holds. Give it a timeout of a minute or more.

        Each function gets exactly what it calls: BatchGetItem and UpdateItem on the outbox
        items of `key_prefixes` (keys `<key prefix>#*#outbox#*` and `<key prefix>#outbox#*`:
        no idempotency record, no other function's events), `events:PutEvents` on `event_bus`
        for `sources` only (the `events:source` condition); the publisher the stream's reads
        (ListStreams on this table's streams only) and `sqs:SendMessage` on `on_failure`; the
        sweeper `dynamodb:Query` on its prefixes' partitions of the index. The bus's policy
        denies putting `sources` to every other principal, of any account.

        Args:
            publisher: The function whose handler is the publisher.
            key_prefixes: The key prefixes of the functions that emit (their decorators'
                `key_prefix`); the handlers' `key_prefixes`.
            event_bus: The bus the events go to.
            sources: The `source` of every event those functions emit (`emit(source=...)`);
                only these two functions may put them on `event_bus`.
            on_failure: Where the mapping reports the stream ranges it gave up on.
            retry_attempts: Retries of a failed batch.
            max_record_age: Records older than this are given up on.
            sweeper: The function whose handler is the sweeper; None: no sweep (an item whose
                stream record is lost waits for `outbox republish`).
            sweep_every: How often the sweeper runs; 5 minutes by default.

        Raises:
            ValueError: The table was made without `outbox=True`; `key_prefixes` or `sources`
                is empty, or one of them could not name a key prefix or a source in a grant; a
                source is already reserved for another publisher of this table on that bus.
        """
        stream_arn = self.table.table_stream_arn
        if stream_arn is None:
            raise ValueError("add_outbox_publisher needs IdempotencyTable(..., outbox=True)")
        bad = [p for p in key_prefixes if not _KEY_PREFIX.match(p)]
        if bad or not key_prefixes or isinstance(key_prefixes, str):
            raise ValueError(f"key_prefixes {list(key_prefixes)!r} cannot name outbox items")
        if not sources or isinstance(sources, str) or not all(map(_SOURCE.match, sources)):
            raise ValueError(f"sources {list(sources)!r} cannot name event sources in a grant")
        reserved = self._sources.setdefault(event_bus.node.path, set())
        if reserved & set(sources):
            raise ValueError(f"sources {sorted(reserved & set(sources))} have a publisher already")
        reserved.update(sources)
        self._batch_functions[publisher.node.path] = publisher
        if on_failure is not None:
            self._failure_queues[on_failure.node.path] = on_failure
        if sweeper is not None:
            self._sweepers[sweeper.node.path] = sweeper
        outbox_functions = [publisher] if sweeper is None else [publisher, sweeper]
        for function in outbox_functions:
            grant_outbox_items(function, self.table.table_arn, key_prefixes)
            grant_put_events(function, event_bus, sources)
        reserve_sources(self, event_bus, sources, outbox_functions)
        if sweeper is not None:
            grant_sweep(sweeper, self.table.table_arn, key_prefixes)
            schedule_sweeper(self, sweeper, sweep_every or Duration.minutes(5))
        # Not table.grant_stream_read: it grants dynamodb:ListStreams on "*".
        iam.Grant.add_to_principal(
            grantee=publisher, actions=list(STREAM_ACTIONS), resource_arns=[stream_arn]
        )
        iam.Grant.add_to_principal(
            grantee=publisher,
            actions=["dynamodb:ListStreams"],
            resource_arns=[f"{self.table.table_arn}/stream/*"],
        )
        return lambda_.EventSourceMapping(
            self,
            f"OutboxPublisher{publisher.node.id}",
            target=publisher,
            event_source_arn=stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=100,
            max_batching_window=Duration.seconds(1),
            parallelization_factor=1,
            report_batch_item_failures=True,
            bisect_batch_on_error=True,
            retry_attempts=retry_attempts,
            max_record_age=max_record_age or Duration.hours(6),
            on_failure=None if on_failure is None else event_sources.SqsDlq(on_failure),
            filters=[stream_filter(key_prefixes)],
        )

    def add_dashboard(
        self,
        id: str = "Dashboard",
        *,
        namespace: str,
        dimensions: Mapping[str, str],
        dashboard_name: str | None = None,
        period: Duration | None = None,
        batch_functions: Sequence[lambda_.IFunction] = (),
        failure_queues: Sequence[sqs.IQueue] = (),
    ) -> cloudwatch.Dashboard:
        """Add a CloudWatch dashboard of the library's metrics for the functions of this table.

        Widgets, two a row: claims, replays and in-progress conflicts; bodies that raised, lost
        leases and store failures; the store's latency (p50, p99, maximum); store calls and
        DynamoDB requests; the failed invocations (`Errors`) of the batch functions (those
        granted with `batch=True`, the outbox publishers, and `batch_functions`) and the depth
        of the failure queues (the publishers' `on_failure`, and `failure_queues`); with an
        outbox publisher, the oldest unpublished event's age against the 5-minute line, and the
        events published, with the sweepers' runs.

        Args:
            id: The dashboard's construct id.
            namespace: The functions' metric namespace (`EMFMetrics(namespace)`, or
                `POWERTOOLS_METRICS_NAMESPACE` with Powertools Metrics).
            dimensions: The dimension set the metrics carry: `{"service": <service>}` with
                Powertools Metrics or `EMFMetrics(service=...)`.
            dashboard_name: A physical name; None lets CloudFormation name it.
            period: Each point's period; one minute by default.
            batch_functions: More batch functions whose failed invocations to chart.
            failure_queues: More queues where failed records or ranges wait (dead-letter
                queues, a stream mapping's `on_failure`).

        Returns:
            The `aws_cloudwatch.Dashboard`, to add widgets of your own.

        Raises:
            ValueError: `namespace` is empty or `dimensions` holds an empty name or value.
        """
        if not namespace:
            raise ValueError("namespace must name the functions' metric namespace")
        if not all(name and value for name, value in dimensions.items()):
            raise ValueError(f"dimensions {dict(dimensions)!r} need non-empty names and values")
        functions = {**self._batch_functions, **{f.node.path: f for f in batch_functions}}
        queues = {**self._failure_queues, **{q.node.path: q for q in failure_queues}}
        return build_dashboard(
            self,
            id,
            namespace=namespace,
            dimensions=dimensions,
            dashboard_name=dashboard_name,
            period=period or Duration.minutes(1),
            batch_functions=list(functions.values()),
            failure_queues=list(queues.values()),
            sweepers=list(self._sweepers.values()),
            outbox=bool(self._sources),  # an outbox publisher was added
        )
