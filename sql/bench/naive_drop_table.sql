-- The naive Spark baseline of `dkm bench pipeline` (dkmsks.bench.naive_spark): start afresh.
DROP TABLE IF EXISTS IDENTIFIER(:table)
