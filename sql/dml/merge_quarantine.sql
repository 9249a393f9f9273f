-- A rejected row is recorded once, however often its file is ingested.
MERGE INTO IDENTIFIER(:target) AS q
USING IDENTIFIER(:source) AS s
ON q.target = s.target AND q.source = s.source AND q.line = s.line AND q.reason = s.reason
WHEN NOT MATCHED THEN INSERT *
