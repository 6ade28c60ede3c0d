-- Queues. Names compare byte by byte (COLLATE "C"), as the embedded engine sorts them.
-- A configuration is stored as its settable attributes by their AWS names and string forms
-- (QueueConfig::stored_attributes), which never change meaning. Times are Unix milliseconds.
CREATE TABLE queues (
    name text COLLATE "C" PRIMARY KEY,
    -- Tells incarnations of one name apart (receipt handles of a deleted queue stay invalid).
    uid bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    fifo boolean NOT NULL,
    attributes jsonb NOT NULL,
    tags jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at bigint NOT NULL,
    last_modified_at bigint NOT NULL,
    last_purge bigint,
    -- The RedrivePolicy's target, for ListDeadLetterSourceQueues.
    dead_letter_target_arn text
);
CREATE INDEX queues_by_dead_letter_target ON queues (dead_letter_target_arn)
    WHERE dead_letter_target_arn IS NOT NULL;

-- When each name was last deleted, for --deleted-queue-cooldown (QueueDeletedRecently).
CREATE TABLE deleted_queues (
    name text COLLATE "C" PRIMARY KEY,
    deleted_at bigint NOT NULL
);
