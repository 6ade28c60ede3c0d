-- What the recorded protocols' endpoints (email, sms, application, lambda, firehose) would have
-- received, for every node to list: each node kept its own in memory before. `record` is the
-- message in persist's versioned recorded-message format; `id` is the order they were kept in.
-- The newest 10,000 are kept; `recorded_state.dropped` counts those dropped for room.
CREATE TABLE recorded_messages (
    id bigserial PRIMARY KEY,
    record bytea NOT NULL
);
CREATE TABLE recorded_state (
    id integer PRIMARY KEY CHECK (id = 1),
    dropped bigint NOT NULL
);
INSERT INTO recorded_state (id, dropped) VALUES (1, 0);
