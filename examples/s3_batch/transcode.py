from urllib.parse import unquote_plus

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyAlreadyInProgressError,
    IdempotencyConfig,
    event_keys,
    idempotent_function,
)

store = DynamoDBPersistenceLayer("IdempotencyTable")
config = IdempotencyConfig(
    event_key_jmespath=event_keys.S3_BATCH_OPERATIONS,  # job.id + taskId
    raise_on_no_idempotency_key=True,
)


def transcode(bucket: str, key: str, version_id: str | None) -> str:
    """Stand-in for the work done once per object of the job's manifest."""
    return f"s3://{bucket}/transcoded/{key}"


@idempotent_function(
    data_keyword_argument="event",
    persistence_store=store,
    config=config,
)
def run_task(event: dict) -> dict:
    """Run the task once; its outcome (success or permanent failure) is stored and replayed."""
    task = event["tasks"][0]
    # Schema 2.0 names the bucket; 1.0 gives its ARN. Keys arrive URL-encoded.
    bucket = task.get("s3Bucket") or task["s3BucketArn"].split(":::")[-1]
    key = unquote_plus(task["s3Key"])
    try:
        location = transcode(bucket, key, task.get("s3VersionId"))
    except ValueError as exc:  # this object can never be done: say so, and never try again
        return {"resultCode": "PermanentFailure", "resultString": f"cannot transcode: {exc}"}
    return {"resultCode": "Succeeded", "resultString": location}


def handler(event: dict, context) -> dict:
    config.register_lambda_context(context)  # leases end when this invocation would time out
    try:
        result = run_task(event=event)
    except (TimeoutError, ConnectionError, IdempotencyAlreadyInProgressError) as exc:
        # Nothing is stored for these (or another invocation is still running the task): S3
        # runs the task again before the job ends, and that run does the work or replays it.
        result = {"resultCode": "TemporaryFailure", "resultString": f"retry: {exc}"}
    # The answer is built for this invocation (its invocationId), around the stored result.
    return {
        "invocationSchemaVersion": event["invocationSchemaVersion"],
        "treatMissingKeysAs": "PermanentFailure",
        "invocationId": event["invocationId"],
        "results": [{"taskId": event["tasks"][0]["taskId"], **result}],
    }
