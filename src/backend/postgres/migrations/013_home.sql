-- The region and account the database belongs to: stored queue and topic names are keys
-- relative to this home (a bare name is the home's), so every node must run with the same
-- --region and --account-id. The first node to start records its own; a node with others is
-- refused. A database from before this migration takes the first node's after it.
CREATE TABLE orderly_home (
    id integer PRIMARY KEY CHECK (id = 1),
    region text NOT NULL,
    account text NOT NULL
);
