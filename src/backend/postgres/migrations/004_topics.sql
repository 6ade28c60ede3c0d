-- Topics. `image` is the topic's settings, tags and subscriptions in persist's versioned topic
-- format (as the embedded log's TopicChange::Settings writes them), rewritten by each change to
-- them under the row's lock. A publish locks the row too, so a topic's publishes take turns:
-- every subscribed queue receives them in one order, and a subscription changed meanwhile sees
-- a publish entirely or not at all.
CREATE TABLE topics (
    name text COLLATE "C" PRIMARY KEY,
    fifo boolean NOT NULL,
    image bytea NOT NULL,
    -- The count behind the next FIFO sequence number (the image's own is not kept up to date).
    next_seq bigint NOT NULL DEFAULT 1,
    published bigint NOT NULL DEFAULT 0,
    deduplicated bigint NOT NULL DEFAULT 0
);

-- FIFO topics' deduplication: what a publish with this key got in the last five minutes.
CREATE TABLE topic_dedup (
    topic text COLLATE "C" NOT NULL REFERENCES topics (name) ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    message_id text NOT NULL,
    seq bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (topic, key)
);

-- The key SNS messages are signed with: one for every node, so a signature verifies whichever
-- node signed. Made by the first node that needs it.
CREATE TABLE signing_key (
    id integer PRIMARY KEY CHECK (id = 1),
    private_key_der bytea NOT NULL,
    certificate_pem text NOT NULL,
    certificate_file text NOT NULL
);
