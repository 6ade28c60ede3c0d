//! Dead-letter queues: redrive after maxReceiveCount, source listing, and move tasks back.

use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName as S, QueueAttributeName as A};

use crate::common::{create_queue, fifo_queue, redrive_to, start, start_with_manual_clock};

#[tokio::test]
async fn redrive_to_dlq_then_move_back() {
    let (server, clock) = start_with_manual_clock().await;
    let dlq = create_queue(&server, "dlq", &[]).await;
    let src = create_queue(&server, "src", &[("RedrivePolicy", &redrive_to("dlq", 1))]).await;
    server
        .sqs
        .send_message()
        .queue_url(&src)
        .message_body("poison")
        .send()
        .await
        .unwrap();
    let first = server
        .sqs
        .receive_message()
        .queue_url(&src)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    assert_eq!(first.messages.unwrap().len(), 1);
    let second = server
        .sqs
        .receive_message()
        .queue_url(&src)
        .send()
        .await
        .unwrap();
    assert!(
        second.messages.is_none(),
        "the message went to the DLQ instead"
    );
    // In a shard of its own, the dead-letter queue takes it a moment later.
    crate::common::carried(&server).await;
    let moved = server
        .sqs
        .receive_message()
        .queue_url(&dlq)
        .message_system_attribute_names(S::All)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let attrs = moved[0].attributes().unwrap();
    assert_eq!(
        attrs[&S::ApproximateReceiveCount],
        "2",
        "receive count is not reset"
    );
    assert_eq!(
        attrs[&S::DeadLetterQueueSourceArn],
        "arn:aws:sqs:us-east-1:000000000000:src"
    );
    let sources = server
        .sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls, vec![src.clone()]);

    let source_arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
    let task = server
        .sqs
        .start_message_move_task()
        .source_arn(source_arn)
        .send()
        .await
        .unwrap();
    assert!(task.task_handle.is_some());
    let back = server
        .sqs
        .receive_message()
        .queue_url(&src)
        .wait_time_seconds(5)
        .send()
        .await
        .unwrap();
    assert_eq!(back.messages.unwrap()[0].body(), Some("poison"));
    // The task finds nothing left at its next step, a tenth of a second on.
    clock.advance_millis(1_000);
    let mut status = String::new();
    // Bounded: the step is taken by the task's own runner, as soon as it is scheduled.
    for _ in 0..50 {
        let tasks = server
            .sqs
            .list_message_move_tasks()
            .source_arn(source_arn)
            .send()
            .await
            .unwrap();
        let t = &tasks.results.unwrap()[0];
        status = t.status().unwrap().to_string();
        if status == "COMPLETED" {
            assert_eq!(t.approximate_number_of_messages_moved, 1);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, "COMPLETED");
}

#[tokio::test]
async fn move_task_rules() {
    let server = start().await;
    create_queue(&server, "plain", &[]).await;
    let err = server
        .sqs
        .start_message_move_task()
        .source_arn("arn:aws:sqs:us-east-1:000000000000:plain")
        .send()
        .await
        .unwrap_err();
    let msg = aws_sdk_sqs::error::ProvideErrorMetadata::message(&err.into_service_error())
        .map(String::from);
    assert_eq!(
        msg.as_deref(),
        Some("Source queue must be configured as a Dead Letter Queue.")
    );
    let err = server
        .sqs
        .start_message_move_task()
        .source_arn("arn:aws:sqs:us-east-1:000000000000:none")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_resource_not_found_exception());
}

#[tokio::test]
async fn redrive_policy_requires_same_queue_type() {
    let server = start().await;
    fifo_queue(&server, "dlq.fifo", &[]).await;
    let err = server
        .sqs
        .create_queue()
        .queue_name("std")
        .attributes(A::RedrivePolicy, redrive_to("dlq.fifo", 3))
        .send()
        .await
        .unwrap_err();
    let message = aws_sdk_sqs::error::ProvideErrorMetadata::message(&err.into_service_error())
        .map(String::from);
    assert!(message
        .unwrap()
        .contains("Dead-letter queue must be same type of queue as the source.."));
}

#[tokio::test]
async fn move_task_destination_must_match_the_source_type() {
    let server = start().await;
    create_queue(&server, "dlq", &[]).await;
    create_queue(&server, "src", &[("RedrivePolicy", &redrive_to("dlq", 1))]).await;
    fifo_queue(&server, "other.fifo", &[]).await;
    let err = server
        .sqs
        .start_message_move_task()
        .source_arn("arn:aws:sqs:us-east-1:000000000000:dlq")
        .destination_arn("arn:aws:sqs:us-east-1:000000000000:other.fifo")
        .send()
        .await
        .unwrap_err();
    let service = err.into_service_error();
    assert_eq!(
        aws_sdk_sqs::error::ProvideErrorMetadata::code(&service),
        Some("InvalidParameterValue")
    );
}

#[tokio::test]
async fn graceful_shutdown_stops_move_tasks_between_steps() {
    let clock = crate::common::manual_clock();
    let app =
        orderly::app::App::bind_with_clock(&orderly::config::Config::ephemeral(), clock.clone())
            .await
            .unwrap();
    let addr = app.local_addr().unwrap();
    let service = app.service.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.serve(async {
        let _ = stopped.await;
    }));
    let server = crate::common::Server {
        addr,
        sqs: crate::common::client(addr),
        sns: crate::common::sns_client(addr),
        others: Vec::new(),
    };
    let dlq = create_queue(&server, "dlq", &[]).await;
    create_queue(&server, "src", &[("RedrivePolicy", &redrive_to("dlq", 1))]).await;
    for i in 0..30 {
        server
            .sqs
            .send_message()
            .queue_url(&dlq)
            .message_body(format!("m{i}"))
            .send()
            .await
            .unwrap();
    }
    // Ten messages a second of the server's clock: one per 100 ms step.
    server
        .sqs
        .start_message_move_task()
        .source_arn("arn:aws:sqs:us-east-1:000000000000:dlq")
        .destination_arn("arn:aws:sqs:us-east-1:000000000000:src")
        .max_number_of_messages_per_second(10)
        .send()
        .await
        .unwrap();
    let left = || async {
        let view = service
            .backend
            .describe_queue("dlq", orderly::clock::Clock::now(&*clock))
            .await;
        view.unwrap().counts.visible
    };
    // Steps fall due at 0, 100, 200 and 300 ms.
    clock.advance_millis(350);
    for _ in 0..100 {
        if left().await == 26 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(left().await, 26, "four steps by 350 ms");
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    // Shutdown waited for the pacing tasks to end: however far the clock goes, none steps.
    clock.advance_millis(10_000);
    tokio::task::yield_now().await;
    assert_eq!(left().await, 26, "no step runs after shutdown");
}

#[tokio::test]
async fn move_task_handles_are_aws_shaped_and_an_unknown_task_is_not_found() {
    use base64::Engine as _;
    let server = start().await;
    create_queue(&server, "dead", &[]).await;
    let src = create_queue(
        &server,
        "live",
        &[("RedrivePolicy", &redrive_to("dead", 1))],
    )
    .await;
    assert!(!src.is_empty());
    let source_arn = "arn:aws:sqs:us-east-1:000000000000:dead";
    // A handle as AWS writes one, naming a task that does not exist: 404, not a bad handle.
    let foreign = base64::engine::general_purpose::STANDARD.encode(format!(
        r#"{{"taskId":"00000000-0000-0000-0000-000000000000","sourceArn":"{source_arn}"}}"#
    ));
    let err = server
        .sqs
        .cancel_message_move_task()
        .task_handle(&foreign)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 404);
    let service = err.into_service_error();
    assert!(service.is_resource_not_found_exception(), "{service:?}");
    // Ours decode to the same shape, and cancel the task they name (five messages at one a
    // second: still running when cancelled). They were sent to the DLQ directly, so they have
    // no source to go back to: the task names its destination, or its first step would fail
    // it (a race with the cancel this test once lost).
    let dead = format!("http://{}/000000000000/dead", server.addr);
    for n in 0..5 {
        let body = format!("m{n}");
        let sent = server
            .sqs
            .send_message()
            .queue_url(&dead)
            .message_body(body);
        sent.send().await.unwrap();
    }
    let task = server
        .sqs
        .start_message_move_task()
        .source_arn(source_arn)
        .destination_arn("arn:aws:sqs:us-east-1:000000000000:live")
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap();
    let handle = task.task_handle.unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&handle)
        .unwrap();
    let fields: serde_json::Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(fields["sourceArn"], source_arn);
    assert!(fields["taskId"].as_str().is_some_and(|id| !id.is_empty()));
    let cancelled = server
        .sqs
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .unwrap();
    assert!(cancelled.approximate_number_of_messages_moved < 5);
}

#[tokio::test]
async fn a_queue_may_name_itself_as_its_dead_letter_queue() {
    let server = start().await;
    let url = create_queue(&server, "loop", &[]).await;
    server
        .sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(A::RedrivePolicy, redrive_to("loop", 2))
        .send()
        .await
        .unwrap();
    let sources = server
        .sqs
        .list_dead_letter_source_queues()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls, vec![url]);
}
