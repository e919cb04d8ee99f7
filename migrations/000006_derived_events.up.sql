-- The normal path's history follows from the row's own stamps (txlog.Log.Events): active at
-- created_at, prepared at prepared_at, committed at finished_at. Rows written from this version
-- on (derived_events = true) store no event for those three steps, which saves every request
-- three inserts into coordinator_events and their index entries; every other change (a claim,
-- an abort and its cause, committing, a heuristic outcome, an operator's action, a reset for a
-- retry) is still stored. Existing rows keep false: their history is stored whole.
-- ADD COLUMN with a constant default changes no row; SET DEFAULT applies to new rows only.
ALTER TABLE coordinator_transactions ADD COLUMN derived_events boolean NOT NULL DEFAULT false;
ALTER TABLE coordinator_transactions ALTER COLUMN derived_events SET DEFAULT true;
