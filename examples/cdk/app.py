import os

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from idempotent_lambda_cdk import IdempotencyTable

EXPIRY = cdk.Duration.days(1)  # the functions' expires_after_seconds
NAMESPACE = "IdempotentOrders"  # the functions' metrics (POWERTOOLS_METRICS_NAMESPACE)


class OrdersStack(cdk.Stack):
    """The sample's CreateOrder (HTTP API, JWT) and ProcessPayment (SQS), on one idempotency table,
    and CreateOrder's OrderCreated through the outbox: PublishEvents puts it on a bus whose rule
    feeds ReserveStock's queue.

    `bundle` is a folder with the handlers (the `app` package of samples/) and their
    requirements, idempotent-lambda included (built as the CDK page of the docs shows).
    """

    def __init__(self, scope: Construct, id: str, *, bundle: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        idempotency = IdempotencyTable(
            self, "Idempotency", large_results=True, record_expiry=EXPIRY, outbox=True
        )
        bus = events.EventBus(self, "OrderEvents")
        stock = dynamodb.TableV2(
            self,
            "Stock",
            partition_key=dynamodb.Attribute(name="sku", type=dynamodb.AttributeType.STRING),
            deletion_protection=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        orders = dynamodb.TableV2(
            self,
            "Orders",
            partition_key=dynamodb.Attribute(name="order_id", type=dynamodb.AttributeType.STRING),
            dynamo_stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        code = lambda_.Code.from_asset(bundle)

        def function(name: str, handler: str, timeout: int = 10) -> lambda_.Function:
            return lambda_.Function(
                self,
                name,
                runtime=lambda_.Runtime.PYTHON_3_13,
                architecture=lambda_.Architecture.ARM_64,
                handler=handler,
                code=code,
                timeout=cdk.Duration.seconds(timeout),
                memory_size=256,
                # samples/app/aws.py's store offloads under large_result_prefix(key_prefix),
                # idempotency/<key_prefix>/: the objects grant_idempotency(offload=True) covers.
                environment={
                    "IDEMPOTENCY_TABLE": idempotency.table.table_name,
                    "LARGE_RESULTS_BUCKET": idempotency.bucket.bucket_name,
                    "IDEMPOTENCY_EXPIRY_DAYS": str(int(EXPIRY.to_days())),
                    "ORDERS_TABLE": orders.table_name,
                    "STOCK_TABLE": stock.table_name,
                    "ORDER_EVENTS_BUS": bus.event_bus_name,
                    "POWERTOOLS_SERVICE_NAME": "orders",
                    "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
                },
            )

        # Each function: its own records and large results, nothing else of the table.
        create_order = function("CreateOrder", "app.create_order.handler")
        # Its records, large results and outbox items (keys <record key>#outbox#<event id>).
        idempotency.grant_idempotency(create_order, key_prefix="orders.create_order", offload=True)
        orders.grant(create_order, "dynamodb:PutItem")  # the order's Put in the transaction

        process_payment = function("ProcessPayment", "app.process_payment.handler")
        idempotency.grant_idempotency(
            process_payment, key_prefix="orders.process_payment", batch=True, offload=True
        )
        orders.grant(process_payment, "dynamodb:GetItem", "dynamodb:UpdateItem")

        # Callers sign in to this pool; the API accepts its access tokens only, so every request
        # has a caller (the JWT's sub), by which idempotent_http scopes the keys.
        users = cognito.UserPool(
            self,
            "Users",
            self_sign_up_enabled=False,
            sign_in_aliases=cognito.SignInAliases(email=True),
            deletion_protection=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        client = users.add_client("ApiClient", auth_flows=cognito.AuthFlow(user_srp=True))
        api = apigw.HttpApi(self, "Api")
        api.add_routes(
            path="/orders",
            methods=[apigw.HttpMethod.POST],
            integration=integrations.HttpLambdaIntegration("CreateOrder", create_order),
            authorizer=authorizers.HttpUserPoolAuthorizer(
                "Users", users, user_pool_clients=[client]
            ),
        )

        dead_letters = sqs.Queue(
            self, "PaymentsDeadLetters", retention_period=cdk.Duration.days(14)
        )
        payments = sqs.Queue(
            self,
            "Payments",
            visibility_timeout=cdk.Duration.seconds(90),  # > 6 x the timeout + the window
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=5, queue=dead_letters),
            enforce_ssl=True,
        )
        process_payment.add_event_source(
            event_sources.SqsEventSource(
                payments,
                batch_size=10,
                max_batching_window=cdk.Duration.seconds(1),
                report_batch_item_failures=True,
                max_concurrency=5,
            )
        )

        # The outbox: PublishEvents runs on the idempotency table's stream (CreateOrder's outbox
        # items only) and puts the events on the bus; what it gives up on is reported to
        # `failures`. SweepOutbox publishes, every 5 minutes, what the stream did not bring.
        # Only these two may put events of source "orders" on the bus.
        publish_events = function("PublishEvents", "app.publish_events.handler")
        sweep_outbox = function("SweepOutbox", "app.sweep_outbox.handler", timeout=60)
        failures = sqs.Queue(
            self, "OutboxPublishFailures", retention_period=cdk.Duration.days(14), enforce_ssl=True
        )
        idempotency.add_outbox_publisher(
            publish_events,
            key_prefixes=["orders.create_order"],  # the functions that emit
            event_bus=bus,
            sources=["orders"],  # what they emit
            on_failure=failures,
            sweeper=sweep_outbox,
        )

        # OrderCreated goes to ReserveStock's queue; the consumer keys on the event's outbox id
        # (event_keys.OUTBOX_EVENT), so a second delivery replays.
        order_dead_letters = sqs.Queue(
            self, "OrderEventsDeadLetters", retention_period=cdk.Duration.days(14), enforce_ssl=True
        )
        order_events = sqs.Queue(
            self,
            "OrderEventsQueue",
            visibility_timeout=cdk.Duration.seconds(90),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=5, queue=order_dead_letters),
            enforce_ssl=True,
        )
        events.Rule(
            self,
            "OrderCreated",
            event_bus=bus,
            event_pattern=events.EventPattern(source=["orders"], detail_type=["OrderCreated"]),
            targets=[
                targets.SqsQueue(
                    order_events,
                    dead_letter_queue=order_dead_letters,
                    max_event_age=cdk.Duration.hours(24),
                    retry_attempts=185,
                )
            ],
        )
        reserve_stock = function("ReserveStock", "app.reserve_stock.handler")
        idempotency.grant_idempotency(
            reserve_stock, key_prefix="orders.reserve_stock", batch=True, offload=True
        )
        stock.grant(reserve_stock, "dynamodb:UpdateItem")  # the ADDs in the transaction
        reserve_stock.add_event_source(
            event_sources.SqsEventSource(
                order_events,
                batch_size=10,
                max_batching_window=cdk.Duration.seconds(1),
                report_batch_item_failures=True,
                max_concurrency=5,
            )
        )

        # "Outbox not published" is an incident: the publisher's metric of the oldest event
        # it found unpublished, over 5 minutes.
        cloudwatch.Alarm(
            self,
            "OutboxUnpublishedAge",
            metric=cloudwatch.Metric(
                namespace=NAMESPACE,
                metric_name="OutboxOldestUnpublishedAge",
                dimensions_map={"service": "orders"},
                statistic="Maximum",
                period=cdk.Duration.minutes(1),
            ),
            threshold=300,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        # The sweeper publishes what the stream lost: one that stops running is an incident too.
        cloudwatch.Alarm(
            self,
            "SweepOutboxNotRunning",
            metric=sweep_outbox.metric_invocations(
                statistic="Sum", period=cdk.Duration.minutes(15)
            ),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )

        # A page beside the alarms: decisions, the store's cost, batch failures (the functions
        # granted with batch=True, the publisher, and the payments' dead letters), the outbox.
        idempotency.add_dashboard(
            namespace=NAMESPACE,
            dimensions={"service": "orders"},
            failure_queues=[dead_letters, order_dead_letters],
        )


def build(app: cdk.App, bundle: str) -> OrdersStack:
    """Add the stack to `app`."""
    return OrdersStack(app, "IdempotentOrders", bundle=bundle)


if __name__ == "__main__":  # cdk deploy --app "python examples/cdk/app.py"
    app = cdk.App()
    build(app, os.environ.get("ORDERS_BUNDLE", "build/bundle"))
    app.synth()
