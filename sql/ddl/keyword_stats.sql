-- Keyword frequencies of O_init per plan (P(lambda) = objects / o_init, Eq. 1).
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  plan_version BIGINT NOT NULL,
  keyword STRING NOT NULL,
  objects BIGINT NOT NULL,
  o_init BIGINT NOT NULL
) USING delta
COMMENT 'dkmsks: O_init keyword statistics'
