"""`IdempotencyTable`: the table idempotent_lambda's DynamoDB store expects, and its grants."""

from __future__ import annotations

import math
import re

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

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

#: A key prefix a grant can name: no IAM wildcard, no `#` (it ends the prefix in a key).
_KEY_PREFIX = re.compile(r"^[^*?#\s]+$")


def large_result_prefix(key_prefix: str) -> str:
    """Return where a function of `key_prefix` offloads: `idempotency/<key_prefix>/`.

    Pass it to the store (`DynamoDBPersistenceLayer(large_result_prefix=...)`): the grant of
    `IdempotencyTable.grant_idempotency` covers these objects only.
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
    ) -> None:
        super().__init__(scope, id)
        self._granted: dict[str, list[str]] = {}
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
        )
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
        s3:GetObject and s3:PutObject under `large_result_prefix` of it. Sets
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
            ValueError: `key_prefix` is empty or holds `*`, `?`, `#` or whitespace, or
                `offload` is asked of a table without the bucket.
        """
        if not _KEY_PREFIX.match(key_prefix):
            raise ValueError(f"key_prefix {key_prefix!r} cannot name a key prefix in a grant")
        self._name_granted_prefix(grantee, key_prefix)
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
            resource_arns=[self.bucket.arn_for_objects(f"{large_result_prefix(key_prefix)}*")],
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
