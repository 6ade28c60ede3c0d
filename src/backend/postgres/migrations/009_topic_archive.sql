-- Topic archives: each publish of a topic with an ArchivePolicy (FIFO topics), kept for the
-- policy's retention, for subscriptions' ReplayPolicy. `record` is the publish in persist's
-- versioned archived-publish format. A topic's publishes take turns on its row, so `id` is its
-- publish order.
CREATE TABLE topic_archive (
    topic text COLLATE "C" NOT NULL REFERENCES topics (name) ON DELETE CASCADE,
    id bigserial NOT NULL,
    published_at bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (topic, id)
);
CREATE INDEX topic_archive_time ON topic_archive (topic, published_at);
