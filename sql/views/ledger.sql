-- Processed timestamps: one row per timestamp, from the journal's ledger records.
CREATE OR REPLACE VIEW ledger
COMMENT 'dkmsks: ledger of processed timestamps'
AS SELECT t, plan_version, run_from_t, run_through_t, objects, insertions, deletions, run_id
FROM journal WHERE record = 'ledger'
