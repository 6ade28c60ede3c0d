-- Message move tasks (StartMessageMoveTask). One node paces a running task at a time: the one
-- holding its lease (`runner`, until `lease_until`, Unix milliseconds), renewed by every step.
-- A task whose lease lapsed (its node stopped or died) is taken over by another node. Each step
-- locks the task's row, so steps never overlap and `moved` never passes `to_move`.
CREATE TABLE move_tasks (
    id text PRIMARY KEY,
    -- Start order, newest listed first.
    ord bigint GENERATED ALWAYS AS IDENTITY,
    source_arn text COLLATE "C" NOT NULL,
    destination_arn text,
    rate bigint,
    status text NOT NULL,
    moved bigint NOT NULL DEFAULT 0,
    to_move bigint NOT NULL,
    started_at bigint NOT NULL,
    failure_reason text,
    runner text,
    lease_until bigint NOT NULL DEFAULT 0
);
-- One running task per source, whichever node starts it.
CREATE UNIQUE INDEX move_tasks_one_running ON move_tasks (source_arn) WHERE status = 'RUNNING';
CREATE INDEX move_tasks_by_source ON move_tasks (source_arn, started_at);
