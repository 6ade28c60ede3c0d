-- orderly_decide: what a FIFO topic decides for each entry of a publish, in one call where
-- each entry took three statements (the deduplication claim, the sequence number, the claim's
-- number). Per entry, in order: a key claimed within the window makes the entry a duplicate,
-- answered with the original's message id and sequence number and counted; otherwise the
-- entry takes the topic's next sequence number, which its claim records. The caller holds the
-- topic's row lock, so a topic's entries are numbered one at a time.
CREATE FUNCTION orderly_decide(
    p_topic text,
    p_now bigint,
    p_dedup_until bigint,
    p_keys text[],
    p_ids text[]
) RETURNS TABLE (entry integer, message_id text, seq bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    i integer;
    v_claimed integer;
    v_seq bigint;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        v_claimed := NULL;
        INSERT INTO topic_dedup AS d (topic, key, message_id, seq, expires_at)
            VALUES (p_topic, p_keys[i], p_ids[i], 0, p_dedup_until)
            ON CONFLICT (topic, key) DO UPDATE
            SET message_id = EXCLUDED.message_id, seq = 0, expires_at = EXCLUDED.expires_at
            WHERE d.expires_at <= p_now
            RETURNING 1 INTO v_claimed;
        IF v_claimed IS NULL THEN
            UPDATE topics SET deduplicated = deduplicated + 1 WHERE name = p_topic;
            RETURN QUERY SELECT i, d.message_id, d.seq, true
                FROM topic_dedup d WHERE d.topic = p_topic AND d.key = p_keys[i];
            CONTINUE;
        END IF;
        UPDATE topics SET next_seq = next_seq + 1, published = published + 1
            WHERE name = p_topic RETURNING next_seq - 1 INTO v_seq;
        UPDATE topic_dedup SET seq = v_seq WHERE topic = p_topic AND key = p_keys[i];
        RETURN QUERY SELECT i, p_ids[i], v_seq, false;
    END LOOP;
END
$$;
