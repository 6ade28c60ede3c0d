-- ChangeMessageVisibility(Batch) in one round trip, doing server-side what the node did
-- statement by statement inside one transaction (the group's row stayed locked across all
-- those round trips). Per entry, in the order given (the caller orders a FIFO queue's by
-- group, the lock order): the message is locked, a FIFO one after its group's row, and the
-- entry answered
--   'gone'     no such message;
--   'expired'  a FIFO message not in flight from the receive that issued the receipt;
--   'lapsed'   a standard message not in flight: accepted, nothing done (as AWS);
--   'beyond'   the new end is more than p_limit ms after the message was received;
--   'changed'  its visibility now ends at p_deadlines[i]; a FIFO group's row then follows
--              its head (a message made visible may now be the next one).
-- Timeouts and handles are checked by the caller. Wakes long polls on commit.
CREATE FUNCTION orderly_change_visibility(
    p_uid bigint,
    p_fifo boolean,
    p_now bigint,
    p_seqs bigint[],
    p_receive_nos bigint[],
    p_deadlines bigint[],
    p_limit bigint
) RETURNS TABLE (entry integer, outcome text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    i integer;
    v_group text;
    v_message record;
    v_head record;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_seqs, 1), 0) LOOP
        v_group := NULL;
        IF p_fifo THEN
            SELECT m.group_id INTO v_group FROM messages m
                WHERE m.queue_uid = p_uid AND m.seq = p_seqs[i];
            IF v_group IS NULL THEN
                RETURN QUERY SELECT i, 'gone'::text;
                CONTINUE;
            END IF;
            PERFORM 1 FROM fifo_groups g
                WHERE g.queue_uid = p_uid AND g.group_id = v_group FOR UPDATE;
        END IF;
        SELECT m.visible_at, m.received, m.receive_no, m.received_at INTO v_message
            FROM messages m WHERE m.queue_uid = p_uid AND m.seq = p_seqs[i] FOR UPDATE;
        IF NOT FOUND THEN
            RETURN QUERY SELECT i, 'gone'::text;
            CONTINUE;
        END IF;
        IF p_fifo AND NOT (v_message.received AND v_message.visible_at > p_now
                           AND v_message.receive_no = p_receive_nos[i]) THEN
            RETURN QUERY SELECT i, 'expired'::text;
            CONTINUE;
        END IF;
        IF NOT (v_message.received AND v_message.visible_at > p_now) THEN
            RETURN QUERY SELECT i, 'lapsed'::text;
            CONTINUE;
        END IF;
        IF p_deadlines[i] - coalesce(v_message.received_at, 0) > p_limit THEN
            RETURN QUERY SELECT i, 'beyond'::text;
            CONTINUE;
        END IF;
        UPDATE messages SET visible_at = p_deadlines[i], visibility_epoch = visibility_epoch + 1
            WHERE queue_uid = p_uid AND seq = p_seqs[i];
        IF p_fifo THEN
            SELECT m.seq, m.visible_at INTO v_head FROM messages m
                WHERE m.queue_uid = p_uid AND m.group_id = v_group ORDER BY m.seq LIMIT 1;
            UPDATE fifo_groups SET head_seq = v_head.seq, available_at = v_head.visible_at
                WHERE queue_uid = p_uid AND group_id = v_group;
        END IF;
        RETURN QUERY SELECT i, 'changed'::text;
    END LOOP;
    PERFORM pg_notify('orderly_queue', p_uid::text);
END
$$;
