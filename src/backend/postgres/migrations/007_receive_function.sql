-- Receives in one round trip, doing server-side what `message_store.rs`'s `receive_once` does
-- statement by statement when no receive attempt id is given: up to `p_max` visible messages
-- put in flight until `p_deadline`, a standard queue's oldest first, a FIFO queue's from ready
-- groups (their rows locked, skipping those another receive holds), each group's visible run
-- from its head and never past a message that is not visible; each group then points at its
-- head. Answers the messages taken, in order.
--
-- A message received `p_max_receives` times already is due its dead-letter queue, which needs
-- its content rewritten: the function then raises `orderly: dead letters due` (nothing is
-- kept) and the caller takes the full path.
CREATE FUNCTION orderly_receive(
    p_uid bigint,
    p_fifo boolean,
    p_now bigint,
    p_deadline bigint,
    p_max integer,
    p_max_receives integer
) RETURNS TABLE (seq bigint, receive_no bigint, receive_count integer, first_receive_at bigint, content bytea)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_group record;
    v_message record;
    v_head record;
    v_taken integer := 0;
BEGIN
    IF p_max <= 0 THEN
        RETURN;
    END IF;
    IF NOT p_fifo THEN
        FOR v_message IN SELECT m.seq AS s, m.receive_count AS n FROM messages m
                WHERE m.queue_uid = p_uid AND m.visible_at <= p_now
                ORDER BY m.visible_at, m.seq LIMIT p_max FOR UPDATE SKIP LOCKED LOOP
            IF p_max_receives IS NOT NULL AND v_message.n >= p_max_receives THEN
                RAISE EXCEPTION 'orderly: dead letters due';
            END IF;
            UPDATE messages m SET visible_at = p_deadline, received = true,
                    receive_no = nextval('receive_no'), receive_count = m.receive_count + 1,
                    first_receive_at = coalesce(m.first_receive_at, p_now), received_at = p_now
                WHERE m.queue_uid = p_uid AND m.seq = v_message.s
                RETURNING m.seq, m.receive_no, m.receive_count, m.first_receive_at, m.content
                INTO seq, receive_no, receive_count, first_receive_at, content;
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    FOR v_group IN SELECT g.group_id AS id FROM fifo_groups g
            WHERE g.queue_uid = p_uid AND g.available_at <= p_now
            ORDER BY g.available_at, g.head_seq LIMIT p_max FOR UPDATE SKIP LOCKED LOOP
        EXIT WHEN v_taken >= p_max;
        FOR v_message IN SELECT m.seq AS s, m.visible_at AS v, m.receive_count AS n FROM messages m
                WHERE m.queue_uid = p_uid AND m.group_id = v_group.id
                ORDER BY m.seq LIMIT (p_max - v_taken) LOOP
            -- The group lock: nothing behind a message that is not visible.
            EXIT WHEN v_message.v > p_now;
            IF p_max_receives IS NOT NULL AND v_message.n >= p_max_receives THEN
                RAISE EXCEPTION 'orderly: dead letters due';
            END IF;
            UPDATE messages m SET visible_at = p_deadline, received = true,
                    receive_no = nextval('receive_no'), receive_count = m.receive_count + 1,
                    first_receive_at = coalesce(m.first_receive_at, p_now), received_at = p_now
                WHERE m.queue_uid = p_uid AND m.seq = v_message.s
                RETURNING m.seq, m.receive_no, m.receive_count, m.first_receive_at, m.content
                INTO seq, receive_no, receive_count, first_receive_at, content;
            RETURN NEXT;
            v_taken := v_taken + 1;
        END LOOP;
        SELECT m.seq AS s, m.visible_at AS v INTO v_head FROM messages m
            WHERE m.queue_uid = p_uid AND m.group_id = v_group.id ORDER BY m.seq LIMIT 1;
        IF FOUND THEN
            UPDATE fifo_groups SET head_seq = v_head.s, available_at = v_head.v
                WHERE queue_uid = p_uid AND group_id = v_group.id;
        ELSE
            DELETE FROM fifo_groups WHERE queue_uid = p_uid AND group_id = v_group.id;
        END IF;
    END LOOP;
END
$$;
