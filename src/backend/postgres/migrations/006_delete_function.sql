-- Deletes a batch of messages by their receipts in one round trip, doing server-side what
-- `message_store.rs`'s `delete_one` does statement by statement. Per entry, in the order given
-- (the caller orders a FIFO queue's by group, the lock order): a standard queue's message is
-- deleted whatever the receipt (AWS deletes with a stale handle there); a FIFO message only if
-- it is still in flight from the receive that issued the receipt (else `expired`), under its
-- group's row lock, and the group then points at its next message (or goes, if empty). A
-- message already gone counts as deleted. Wakes long polls on commit.
CREATE FUNCTION orderly_delete(
    p_uid bigint,
    p_fifo boolean,
    p_now bigint,
    p_seqs bigint[],
    p_receive_nos bigint[]
) RETURNS TABLE (entry integer, expired boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    i integer;
    v_group text;
    v_message record;
    v_head record;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_seqs, 1), 0) LOOP
        IF NOT p_fifo THEN
            DELETE FROM messages WHERE queue_uid = p_uid AND seq = p_seqs[i];
            RETURN QUERY SELECT i, false;
            CONTINUE;
        END IF;
        SELECT m.group_id INTO v_group FROM messages m
            WHERE m.queue_uid = p_uid AND m.seq = p_seqs[i];
        IF NOT FOUND OR v_group IS NULL THEN
            RETURN QUERY SELECT i, false;
            CONTINUE;
        END IF;
        PERFORM 1 FROM fifo_groups g
            WHERE g.queue_uid = p_uid AND g.group_id = v_group FOR UPDATE;
        SELECT m.visible_at, m.received, m.receive_no INTO v_message FROM messages m
            WHERE m.queue_uid = p_uid AND m.seq = p_seqs[i] FOR UPDATE;
        IF NOT FOUND THEN
            RETURN QUERY SELECT i, false;
            CONTINUE;
        END IF;
        IF NOT (v_message.received AND v_message.visible_at > p_now
                AND v_message.receive_no = p_receive_nos[i]) THEN
            RETURN QUERY SELECT i, true;
            CONTINUE;
        END IF;
        DELETE FROM messages WHERE queue_uid = p_uid AND seq = p_seqs[i];
        SELECT m.seq, m.visible_at INTO v_head FROM messages m
            WHERE m.queue_uid = p_uid AND m.group_id = v_group ORDER BY m.seq LIMIT 1;
        IF FOUND THEN
            UPDATE fifo_groups SET head_seq = v_head.seq, available_at = v_head.visible_at
                WHERE queue_uid = p_uid AND group_id = v_group;
        ELSE
            DELETE FROM fifo_groups WHERE queue_uid = p_uid AND group_id = v_group;
        END IF;
        RETURN QUERY SELECT i, false;
    END LOOP;
    PERFORM pg_notify('orderly_queue', p_uid::text);
END
$$;
