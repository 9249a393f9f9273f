-- Naive baseline: the current top-k of every subscription that has one (no row = empty result).
CREATE TABLE IDENTIFIER(:table) (sub_id BIGINT, object_ids ARRAY<BIGINT>, d2 ARRAY<DOUBLE>) USING delta
