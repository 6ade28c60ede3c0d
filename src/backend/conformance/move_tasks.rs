//! Message move tasks: their refusals, one running task per source, moving and cancelling.

use super::*;

/// Lets the tasks that pace move tasks take the steps the clock's last move made due. They
/// run on this test's runtime, one thread: each yield lets every woken one take a step, and no
/// real time needs to pass. A step is synchronous, and a runner yields after each one, so a
/// few rounds cover the steps a jump made due one after another.
async fn let_runners_step() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// Waits (moving the clock a tenth of a second at a time) until the source's newest move task
/// stops running; answers it.
async fn finished_task<B: crate::backend::MoveTasks>(
    backend: &B,
    source_arn: &str,
    clock: &ManualClock,
) -> crate::engine::move_task::MoveTask {
    use crate::engine::move_task::MoveStatus;
    for _ in 0..200 {
        let tasks = backend.list_move_tasks(source_arn).await.unwrap();
        if tasks[0].status != MoveStatus::Running {
            return tasks[0].clone();
        }
        clock.advance_millis(100);
        let_runners_step().await;
    }
    panic!("the move task did not finish");
}

/// Message move tasks: StartMessageMoveTask's refusals, one running task per source, moving
/// dead-lettered messages back to their source in group order with their receive counts
/// reset, and cancelling.
pub async fn move_tasks<
    B: QueueAdmin + Messages + crate::backend::MoveTasks + crate::backend::Work,
>(
    backend: &B,
    clock: &ManualClock,
) {
    use crate::backend::StartMove;
    use crate::engine::move_task::MoveStatus;
    let now = || clock.now();
    let fifo = ("FifoQueue", "true");
    for name in ["dlq.fifo", "other"] {
        let attributes: &[(&str, &str)] = if name == "other" { &[] } else { &[fifo] };
        backend
            .create_queue(create(name, attributes, now()))
            .await
            .unwrap();
    }
    let redrive = format!(r#"{{"deadLetterTargetArn":"{ARN}dlq.fifo","maxReceiveCount":1}}"#);
    let attributes = [
        fifo,
        ("RedrivePolicy", &redrive),
        ("VisibilityTimeout", "10"),
    ];
    backend
        .create_queue(create("work.fifo", &attributes, now()))
        .await
        .unwrap();
    for (body, group) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        backend
            .send("work.fifo", message(body, Some(group), Some(body)))
            .await
            .unwrap();
    }
    // Each received once, then dead-lettered by the next receive.
    for _ in 0..2 {
        receive(backend, "work.fifo", 10).await;
        clock.advance_millis(10_000);
    }
    assert!(receive(backend, "work.fifo", 10).await.is_empty());
    assert_eq!(counts(backend, "dlq.fifo", clock).await, (3, 0, 0));

    let start = |source: &'static str, destination: Option<&'static str>, rate: Option<i64>| {
        backend.start_move_task(StartMove {
            source_arn: source,
            destination_arn: destination,
            rate,
            elsewhere: Default::default(),
        })
    };
    let dlq = "arn:aws:sqs:us-east-1:000000000000:dlq.fifo";
    let work = "arn:aws:sqs:us-east-1:000000000000:work.fifo";
    let refusals = [
        (start(work, None, None).await, "Source queue must be configured as a Dead Letter Queue."),
        (start("dlq.fifo", None, None).await, "You must use this format to specify the SourceArn: arn:<partition>:<service>:<region>:<account-id>:<resource-id>"),
        (start("arn:aws:sqs:us-east-1:000000000000:nope", None, None).await, "The resource that you specified for the SourceArn parameter doesn't exist."),
        (start(dlq, Some("arn:aws:sqs:us-east-1:000000000000:other"), None).await, "The source queue and the destination queue must be of the same queue type."),
        (start(dlq, None, Some(501)).await, "Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500."),
    ];
    for (result, text) in refusals {
        assert_eq!(rejected(result).to_string(), text);
    }

    // A slow task: a second for the source is refused while it runs; cancelled, it keeps
    // what it moved and moves no more.
    let slow = start(dlq, None, Some(1)).await.unwrap();
    assert_eq!((slow.status, slow.to_move), (MoveStatus::Running, 3));
    let second = rejected(start(dlq, None, None).await);
    assert!(
        second.to_string().contains("already a task running"),
        "{second:?}"
    );
    let moved = backend.cancel_move_task(&slow.handle()).await.unwrap();
    assert!(moved <= 1, "{moved}");
    clock.advance_millis(5_000);
    let_runners_step().await;
    let listed = backend.list_move_tasks(dlq).await.unwrap();
    assert_eq!(
        (listed[0].id.as_str(), listed[0].status, listed[0].moved),
        (slow.id.as_str(), MoveStatus::Cancelled, moved)
    );
    assert_eq!(
        counts(backend, "dlq.fifo", clock).await.0,
        3 - moved as usize
    );
    let again = rejected(backend.cancel_move_task(&slow.handle()).await);
    assert!(
        matches!(again, EngineError::ResourceNotFound(_)),
        "{again:?}"
    );
    let garbage = rejected(backend.cancel_move_task("not a handle").await);
    assert_eq!(
        garbage.to_string(),
        "Value for parameter TaskHandle is invalid."
    );

    // The rest, at the default rate, to completion.
    let task = start(dlq, None, None).await.unwrap();
    assert_eq!(task.to_move, 3 - moved);
    let done = finished_task(backend, dlq, clock).await;
    assert_eq!(done.id, task.id, "newest first");
    assert_eq!(
        (done.status, done.moved),
        (MoveStatus::Completed, 3 - moved)
    );
    assert_eq!(backend.list_move_tasks(dlq).await.unwrap()[1].id, slow.id);
    assert_eq!(counts(backend, "dlq.fifo", clock).await, (0, 0, 0));
    let back = receive(backend, "work.fifo", 10).await;
    assert_eq!(bodies(&back), ["a1", "a2", "b1"], "group order kept");
    for received in &back {
        assert_eq!(received.message.receive_count, 1, "counts start over");
        assert_eq!(received.message.dead_letter_source_arn(), None);
    }
}
