-- Subsets of a plan: rectangle R (MBR of the balls), region, cost (Eq. 3 / Eq. 6; ps2: the count
-- L(p)), worker, and for ps2 the part's term set.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  plan_version BIGINT NOT NULL,
  subset BIGINT NOT NULL,
  xmin DOUBLE NOT NULL, ymin DOUBLE NOT NULL, xmax DOUBLE NOT NULL, ymax DOUBLE NOT NULL,
  rxmin DOUBLE NOT NULL, rymin DOUBLE NOT NULL, rxmax DOUBLE NOT NULL, rymax DOUBLE NOT NULL,
  weight BIGINT NOT NULL COMMENT 'cost times |O_init|',
  size BIGINT NOT NULL COMMENT 'subscriptions in the subset',
  worker INT NOT NULL COMMENT 'SOP: worker of the whole subset; -1 when spread (DkM-SKS)',
  kind INT NOT NULL COMMENT 'split kind that made the subset',
  depth INT NOT NULL,
  all_terms BOOLEAN COMMENT 'ps2: the part holds every term (null in plans of other methods: ALL)',
  terms ARRAY<STRING> COMMENT 'ps2: the part''s term set when not all_terms'
) USING delta
PARTITIONED BY (plan_version)
COMMENT 'dkmsks: partition plan subsets'
