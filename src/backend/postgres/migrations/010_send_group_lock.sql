-- orderly_send (migration 5), with a cheaper group lock: a group's row is locked with
-- SELECT … FOR UPDATE, which writes no new row version, where migration 5's upsert
-- (`ON CONFLICT … DO UPDATE SET head_seq = head_seq`) wrote one, with new entries in both of
-- the table's indexes, for every message sent; the upsert now runs only for a group that has
-- no row yet. A batch's entries come ordered by group, so consecutive entries of one group
-- take its lock once. Same arguments, answers and lock order as before.
CREATE OR REPLACE FUNCTION orderly_send(
    p_uid bigint,
    p_fifo boolean,
    p_now bigint,
    p_dedup_until bigint,
    p_groups text[],
    p_keys text[],
    p_ids text[],
    p_visible_at bigint[],
    p_bypass boolean[],
    p_contents bytea[]
) RETURNS TABLE (entry integer, message_id text, seq bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    i integer;
    v_seq bigint;
    v_head bigint;
    v_claimed integer;
    v_locked text;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_contents, 1), 0) LOOP
        IF p_fifo THEN
            v_claimed := NULL;
            INSERT INTO dedup AS d (queue_uid, key, message_id, seq, expires_at)
                VALUES (p_uid, p_keys[i], p_ids[i], 0, p_dedup_until)
                ON CONFLICT (queue_uid, key) DO UPDATE
                SET message_id = EXCLUDED.message_id, seq = 0, expires_at = EXCLUDED.expires_at
                WHERE d.expires_at <= p_now OR p_bypass[i]
                RETURNING 1 INTO v_claimed;
            IF v_claimed IS NULL THEN
                RETURN QUERY SELECT i, d.message_id, d.seq, true
                    FROM dedup d WHERE d.queue_uid = p_uid AND d.key = p_keys[i];
                CONTINUE;
            END IF;
            IF v_locked IS DISTINCT FROM p_groups[i] THEN
                SELECT g.head_seq INTO v_head FROM fifo_groups g
                    WHERE g.queue_uid = p_uid AND g.group_id = p_groups[i] FOR UPDATE;
                IF NOT FOUND THEN
                    INSERT INTO fifo_groups AS g (queue_uid, group_id, head_seq, available_at)
                        VALUES (p_uid, p_groups[i], 0, 0)
                        ON CONFLICT (queue_uid, group_id) DO UPDATE SET head_seq = g.head_seq
                        RETURNING g.head_seq INTO v_head;
                END IF;
                v_locked := p_groups[i];
            END IF;
        END IF;
        v_seq := nextval('message_seq');
        INSERT INTO messages (queue_uid, seq, group_id, visible_at, receive_count, enqueued_at, content)
            VALUES (p_uid, v_seq, p_groups[i], p_visible_at[i], 0, p_now, p_contents[i]);
        IF p_fifo THEN
            IF v_head = 0 THEN
                UPDATE fifo_groups SET head_seq = v_seq, available_at = p_visible_at[i]
                    WHERE queue_uid = p_uid AND group_id = p_groups[i];
                v_head := v_seq;
            END IF;
            UPDATE dedup SET seq = v_seq WHERE queue_uid = p_uid AND key = p_keys[i];
        END IF;
        RETURN QUERY SELECT i, p_ids[i], v_seq, false;
    END LOOP;
    PERFORM pg_notify('orderly_queue', p_uid::text);
END
$$;
