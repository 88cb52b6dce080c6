-- Fewer stored bytes per batch (issue 14): the history-by-state index keeps
-- only batches in the states few batches end in. Most batches end
-- published (later superseded); their entries were the bulk of the index,
-- and each publish wrote one more. A page of published or superseded
-- batches walks the primary key from the newest batch instead, where most
-- rows match. Statements that seek the index repeat its condition word for
-- word (store::reads::IN_STATE_INDEX), so that both planners use it
-- whatever the parameters.
DROP INDEX batches_state;
CREATE INDEX batches_state ON batches (state, id) WHERE state NOT IN ('published', 'superseded');
