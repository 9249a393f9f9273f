-- Naive baseline: every live subscription, one row per keyword (the keyword join's build side).
CREATE TABLE IDENTIFIER(:table) (sub_id BIGINT, x DOUBLE, y DOUBLE, k INT, keyword STRING) USING delta
