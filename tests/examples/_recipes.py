"""The runners of the caller recipes: CloudFormation custom resources, Scheduler, S3 Batch.

Each drives the example as its caller does: the same request delivered again (it replays), a
new one (it runs), and an event of another shape (it fails with `IdempotencyKeyError` and the
body never runs). The custom resource answers a pre-signed URL: a server of the test's own on
127.0.0.1 stands in for it, and fails a PUT when told to.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from idempotent_lambda import IdempotencyKeyError
from idempotent_lambda.testing import FakeLambdaContext

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Recorder:
    """Stands in for an example's side effect: records each call, then does ``effect``."""

    def __init__(self, effect: Callable[..., Any]) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.effect = effect

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.effect(*args)


# --- EventBridge Scheduler -------------------------------------------------------------------


def scheduler_input(template: str, scheduled_time: str, attempt: int) -> dict[str, Any]:
    """Fill in the target input's placeholders as Scheduler does on one attempt."""
    values = {
        "schedule-arn": "arn:aws:scheduler:us-east-1:123456789012:schedule/default/nightly",
        "scheduled-time": scheduled_time,
        "execution-id": uuid.uuid4().hex[:16],  # new on every attempt
        "attempt-number": str(attempt),
    }
    for name, value in values.items():
        template = template.replace(f"<aws.scheduler.{name}>", value)
    loaded: dict[str, Any] = json.loads(template)
    return loaded


def run_nightly_report(module: ModuleType) -> None:
    """Attempts of one occurrence replay; the next occurrence runs; no input is refused."""
    from samples.local_stack import CloudFormationLoader

    with (EXAMPLES / "scheduler/schedule.yaml").open(encoding="utf-8") as stream:
        template = yaml.load(stream, Loader=CloudFormationLoader)
    (schedule,) = template["Resources"].values()
    assert "AWS::Scheduler::Schedule" == schedule["Type"]
    target_input = schedule["Properties"]["Target"]["Input"]

    module.build_report = Recorder(lambda name, day: f"reports/{name}/{day}.csv")
    day = f"20{uuid.uuid4().int % 90 + 10}-12-07"  # a fresh occurrence for each run of the test
    first = scheduler_input(target_input, f"{day}T02:00:00Z", attempt=1)
    retry = scheduler_input(target_input, f"{day}T02:00:00Z", attempt=2)
    assert first["execution_id"] != retry["execution_id"]
    answer = module.handler(first, FakeLambdaContext())
    assert answer == module.handler(retry, FakeLambdaContext())  # the same run: replayed
    module.handler(scheduler_input(target_input, f"{day}T02:00:01Z", 1), FakeLambdaContext())
    assert [("sales", day), ("sales", day)] == module.build_report.calls

    with pytest.raises(IdempotencyKeyError):  # a schedule whose input lacks them
        module.handler({"report": "sales"}, FakeLambdaContext())
    assert 2 == len(module.build_report.calls)


# --- S3 Batch Operations ---------------------------------------------------------------------


def batch_task(schema: str, job_id: str, task_id: str, key: str) -> dict[str, Any]:
    """An S3 Batch Operations invocation of one task, in schema 1.0 or 2.0."""
    task: dict[str, Any] = {"taskId": task_id, "s3Key": key, "s3VersionId": None}
    job: dict[str, Any] = {"id": job_id}
    if schema == "1.0":
        task["s3BucketArn"] = "arn:aws:s3:::videos"
    else:
        task["s3Bucket"] = "videos"
        job["userArguments"] = {"preset": "720p"}
    return {
        "invocationSchemaVersion": schema,
        "invocationId": uuid.uuid4().hex,  # each invocation's own
        "job": job,
        "tasks": [task],
    }


def run_transcode(module: ModuleType) -> None:
    """Each task's result is S3's shape; a replay answers the new invocation; failures differ."""
    job = str(uuid.uuid4())
    failures: list[BaseException] = []

    def transcode(bucket: str, key: str, version_id: str | None) -> str:
        if failures:
            raise failures.pop(0)
        return f"s3://{bucket}/transcoded/{key}"

    module.transcode = Recorder(transcode)
    first = batch_task("1.0", job, "dGFzazE=", "clips/a%2Bb+c.mp4")
    answer = module.handler(first, FakeLambdaContext())
    expected_result = {
        "taskId": "dGFzazE=",
        "resultCode": "Succeeded",
        "resultString": "s3://videos/transcoded/clips/a+b c.mp4",
    }
    assert {
        "invocationSchemaVersion": "1.0",
        "treatMissingKeysAs": "PermanentFailure",
        "invocationId": first["invocationId"],
        "results": [expected_result],
    } == answer
    again = {**first, "invocationId": uuid.uuid4().hex}  # S3 sends the task again
    replayed = module.handler(again, FakeLambdaContext())
    assert again["invocationId"] == replayed["invocationId"]
    assert [expected_result] == replayed["results"]
    assert 1 == len(module.transcode.calls)

    second = batch_task("2.0", job, "dGFzazI=", "clips/b.mp4")
    answer = module.handler(second, FakeLambdaContext())
    assert "2.0" == answer["invocationSchemaVersion"]
    assert "Succeeded" == answer["results"][0]["resultCode"]
    assert ("videos", "clips/b.mp4", None) == module.transcode.calls[-1]

    # A temporary failure is not stored: S3 runs the task again, and that run does the work.
    failures.append(TimeoutError("transcoder busy"))
    third = batch_task("1.0", job, "dGFzazM=", "clips/c.mp4")
    assert "TemporaryFailure" == module.handler(third, None)["results"][0]["resultCode"]
    assert "Succeeded" == module.handler(third, None)["results"][0]["resultCode"]
    # A permanent failure is the task's result: stored, and replayed without a new attempt.
    failures.append(ValueError("not a video"))
    fourth = batch_task("2.0", job, "dGFzazQ=", "clips/d.txt")
    for _ in range(2):
        (result,) = module.handler(fourth, FakeLambdaContext())["results"]
        assert {
            "taskId": "dGFzazQ=",
            "resultCode": "PermanentFailure",
            "resultString": "cannot transcode: not a video",
        } == result
    assert 5 == len(module.transcode.calls)

    # The same task while it runs (an overlapping delivery): try again later, never run twice.
    fifth = batch_task("1.0", job, "dGFzazU=", "clips/e.mp4")
    overlapping: list[dict[str, Any]] = []
    module.transcode.effect = lambda *args: (
        overlapping.append(module.handler(fifth, None)) or transcode(*args)
    )
    assert "Succeeded" == module.handler(fifth, None)["results"][0]["resultCode"]
    assert "TemporaryFailure" == overlapping[0]["results"][0]["resultCode"]
    assert 6 == len(module.transcode.calls)

    s3_notification = {"Records": [{"s3": {"bucket": {"name": "videos"}}}]}
    with pytest.raises(IdempotencyKeyError):
        module.handler(s3_notification, None)
    assert 6 == len(module.transcode.calls)


# --- CloudFormation custom resources ---------------------------------------------------------


@contextmanager
def response_url() -> Iterator[tuple[str, list[dict[str, Any]], list[int]]]:
    """Yield a pre-signed URL's stand-in on 127.0.0.1, each PUT it got, and statuses to answer.

    A PUT is answered with the next status of the list, or 200 once it is empty.
    """
    received: list[dict[str, Any]] = []
    statuses: list[int] = []

    class PresignedUrl(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            content_type = self.headers.get("Content-Type")
            received.append({"path": self.path, "type": content_type, "body": json.loads(body)})
            self.send_response(statuses.pop(0) if statuses else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), PresignedUrl)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received, statuses
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def custom_resource_request(url: str, request_type: str, **fields: Any) -> dict[str, Any]:
    request_id = str(uuid.uuid4())
    return {
        "RequestType": request_type,
        "ResponseURL": f"{url}/response/{request_id}?X-Amz-Signature=abc",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/shop/5b1d7f40",
        "RequestId": request_id,
        "ResourceType": "Custom::Subscription",
        "LogicalResourceId": "Subscription",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:...:function:cr", "Plan": "gold"},
        **fields,
    }


def run_custom_resource(module: ModuleType) -> None:
    """Once per request; every delivery PUTs the answer; a failed PUT is retried by a replay."""
    module.create_subscription = Recorder(lambda properties: f"sub-{uuid.uuid4().hex[:8]}")
    module.delete_subscription = Recorder(lambda subscription_id: None)
    with response_url() as (url, received, statuses):
        create = custom_resource_request(url, "Create")
        statuses.append(500)  # the first PUT fails
        with pytest.raises(urllib.error.HTTPError):
            module.handler(create, FakeLambdaContext())
        assert None is module.handler(create, FakeLambdaContext())  # Lambda's retry: a replay
        module.handler(create, FakeLambdaContext())  # CloudFormation sends the request again
        assert 1 == len(module.create_subscription.calls)
        first, retried, repeated = received
        assert first == retried == repeated
        answer = first["body"]
        assert f"/response/{create['RequestId']}?X-Amz-Signature=abc" == first["path"]
        assert "" == first["type"]
        assert {
            "Status": "SUCCESS",
            "PhysicalResourceId": answer["PhysicalResourceId"],
            "StackId": create["StackId"],
            "RequestId": create["RequestId"],
            "LogicalResourceId": "Subscription",
        } == answer
        assert answer["PhysicalResourceId"].startswith("sub-")

        delete = custom_resource_request(
            url, "Delete", PhysicalResourceId=answer["PhysicalResourceId"]
        )
        module.handler(delete, FakeLambdaContext())  # a new request: it runs
        assert [(answer["PhysicalResourceId"],)] == module.delete_subscription.calls
        assert "SUCCESS" == received[-1]["body"]["Status"]

        # A body that fails answers FAILED with the reason, and that answer is the stored one.
        module.create_subscription.effect = lambda properties: {}["Plan"]
        failing = custom_resource_request(url, "Create")
        for _ in range(2):
            module.handler(failing, FakeLambdaContext())
            assert "FAILED" == received[-1]["body"]["Status"]
            assert "KeyError: 'Plan'" == received[-1]["body"]["Reason"]
            assert "Subscription" == received[-1]["body"]["PhysicalResourceId"]
        assert 2 == len(module.create_subscription.calls)

        sent = len(received)
        no_request_id = {key: value for key, value in create.items() if key != "RequestId"}
        with pytest.raises(IdempotencyKeyError):
            module.handler(no_request_id, FakeLambdaContext())
        assert sent == len(received)
        assert 2 == len(module.create_subscription.calls)


RECIPES: dict[str, Callable[..., None]] = {
    "cloudformation/custom_resource.py": run_custom_resource,
    "scheduler/nightly_report.py": run_nightly_report,
    "s3_batch/transcode.py": run_transcode,
}
