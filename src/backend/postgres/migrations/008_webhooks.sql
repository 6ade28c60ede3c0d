-- HTTP/S subscriptions: confirmation tokens and the webhook outbox, shared by every node, so a
-- SubscribeURL works on any node and each delivery is sent by one node at a time.

-- Confirmation tokens (valid two days). `record` is the token in persist's versioned token
-- format: its grant confirms a pending subscription or restores an unsubscribed one.
CREATE TABLE webhook_tokens (
    token text COLLATE "C" PRIMARY KEY,
    -- The subscription a SubscriptionConfirmation's token confirms, deleted at the token's
    -- expiry if still pending; NULL for an UnsubscribeConfirmation's token.
    pending_subscription text COLLATE "C",
    record bytea NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX webhook_tokens_expiry ON webhook_tokens (expires_at);

-- Per HTTP/S subscription with notifications: its throttle's next free send slot, the
-- notifications it holds (the cap), and what became of them, across all nodes.
CREATE TABLE webhook_lanes (
    subscription text COLLATE "C" PRIMARY KEY,
    throttle integer,
    next_slot bigint NOT NULL DEFAULT 0,
    pending integer NOT NULL DEFAULT 0,
    delivered bigint NOT NULL DEFAULT 0,
    retries bigint NOT NULL DEFAULT 0,
    dead_lettered bigint NOT NULL DEFAULT 0,
    dropped bigint NOT NULL DEFAULT 0
);

-- Deliveries waiting, in flight or waiting to be retried. `delivery` is the formatted message
-- in persist's versioned delivery format; retries send the same bytes.
CREATE TABLE webhook_deliveries (
    id bigserial PRIMARY KEY,
    subscription text COLLATE "C" NOT NULL,
    notification boolean NOT NULL,
    -- Ordered lanes (FIFO topics): the message group. Only a group's oldest delivery is ever
    -- due, so a group's messages go out one at a time, in publish order, whichever node sends.
    group_id text COLLATE "C",
    delivery bytea NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    -- When it is next due; NULL behind an earlier delivery of its group. While in flight, the
    -- end of the sending node's lease: if that node dies, another node takes it then.
    due_at bigint,
    in_flight boolean NOT NULL DEFAULT false,
    -- A throttle slot is already reserved: sent at due_at without asking the lane again.
    reserved boolean NOT NULL DEFAULT false
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (due_at, id) WHERE due_at IS NOT NULL;
CREATE INDEX webhook_deliveries_groups ON webhook_deliveries (subscription, group_id, id)
    WHERE group_id IS NOT NULL;
CREATE INDEX webhook_deliveries_lane ON webhook_deliveries (subscription);

-- Queues a notification for an HTTP/S subscription in one round trip. Under the lane's row
-- lock (taken first, so queuing and finishing a group's delivery take turns): refuses it
-- (false) if the lane holds `p_max_pending` already; else stores it, due now unless an
-- earlier delivery of its group is waiting.
CREATE FUNCTION orderly_queue_notification(
    p_subscription text,
    p_throttle integer,
    p_max_pending integer,
    p_group text,
    p_delivery bytea,
    p_now bigint
) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_pending integer;
BEGIN
    INSERT INTO webhook_lanes AS l (subscription, throttle) VALUES (p_subscription, p_throttle)
        ON CONFLICT (subscription) DO UPDATE SET throttle = EXCLUDED.throttle
        RETURNING l.pending INTO v_pending;
    IF v_pending >= p_max_pending THEN
        RETURN false;
    END IF;
    UPDATE webhook_lanes SET pending = pending + 1 WHERE subscription = p_subscription;
    INSERT INTO webhook_deliveries (subscription, notification, group_id, delivery, due_at)
    VALUES (
        p_subscription, true, p_group, p_delivery,
        CASE WHEN p_group IS NOT NULL AND EXISTS (
            SELECT 1 FROM webhook_deliveries
            WHERE subscription = p_subscription AND group_id = p_group
        ) THEN NULL ELSE p_now END
    );
    RETURN true;
END;
$$;
