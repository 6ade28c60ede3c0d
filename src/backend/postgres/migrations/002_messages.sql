-- Messages. A message's state is read from its times, so nothing has to tick:
--   visible    visible_at <= now
--   in flight  received and visible_at > now (visible_at is the end of its visibility timeout)
--   delayed    not received and visible_at > now
-- `content` is the message itself (id, body, attributes, MD5s, sender, group and deduplication
-- ids, sequence number, dead-letter source) in persist's versioned message format; the columns
-- are what queries select and order by.

-- Positions of messages, across all queues (a FIFO sequence number is derived from it). A FIFO
-- send takes its position while it holds its group's row, so within a group positions commit
-- in order, and sends to different groups or queues never wait for each other.
CREATE SEQUENCE message_seq;
-- Counts receives, so each issues a distinct receipt handle.
CREATE SEQUENCE receive_no;

-- A FIFO queue deduplicates by group when created with DeduplicationScope messageGroup, and
-- keeps that for its life, as on AWS, whatever the attribute later says.
ALTER TABLE queues ADD COLUMN dedup_by_group boolean NOT NULL DEFAULT false;
UPDATE queues SET dedup_by_group = (attributes->>'DeduplicationScope' = 'messageGroup');

CREATE TABLE messages (
    queue_uid bigint NOT NULL REFERENCES queues (uid) ON DELETE CASCADE,
    seq bigint NOT NULL,
    group_id text COLLATE "C",
    visible_at bigint NOT NULL,
    received boolean NOT NULL DEFAULT false,
    receive_no bigint NOT NULL DEFAULT 0,
    receive_count integer NOT NULL DEFAULT 0,
    first_receive_at bigint,
    -- When the current visibility timeout started (its total may not pass 12 hours).
    received_at bigint,
    -- Bumped by every visibility change: a retried receive attempt is replayed only while it
    -- holds.
    visibility_epoch integer NOT NULL DEFAULT 0,
    -- Retention counts from here.
    enqueued_at bigint NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (queue_uid, seq)
);
-- Standard receives: the oldest visible messages.
CREATE INDEX messages_by_visibility ON messages (queue_uid, visible_at, seq);
-- A FIFO group's messages in order.
CREATE INDEX messages_by_group ON messages (queue_uid, group_id, seq) WHERE group_id IS NOT NULL;
-- Retention.
CREATE INDEX messages_by_age ON messages (queue_uid, enqueued_at);

-- FIFO groups that hold messages: the head (lowest position) and when it can be received. A
-- receive locks the rows of the groups it takes (FOR UPDATE SKIP LOCKED), so two consumers
-- never hold one group, whichever nodes they are on.
CREATE TABLE fifo_groups (
    queue_uid bigint NOT NULL REFERENCES queues (uid) ON DELETE CASCADE,
    group_id text COLLATE "C" NOT NULL,
    head_seq bigint NOT NULL,
    available_at bigint NOT NULL,
    PRIMARY KEY (queue_uid, group_id)
);
CREATE INDEX fifo_groups_ready ON fifo_groups (queue_uid, available_at, head_seq);

-- FIFO deduplication: what a send with this key stored in the last five minutes (kept after the
-- message is deleted, dropped by purge). `seq` gives the original's sequence number.
CREATE TABLE dedup (
    queue_uid bigint NOT NULL REFERENCES queues (uid) ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    message_id text NOT NULL,
    seq bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (queue_uid, key)
);

-- FIFO receive attempts (ReceiveRequestAttemptId) of the last five minutes: what each returned,
-- in order, as [position, receive number, visibility epoch] triples. A retry gets the same
-- messages and handles while none was deleted, received again or had its visibility changed.
CREATE TABLE receive_attempts (
    queue_uid bigint NOT NULL REFERENCES queues (uid) ON DELETE CASCADE,
    attempt_id text COLLATE "C" NOT NULL,
    entries jsonb NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (queue_uid, attempt_id)
);
