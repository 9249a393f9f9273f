-- Insert-only merge on (id, t, op): replaying a file changes nothing.
MERGE INTO IDENTIFIER(:target) AS e
USING IDENTIFIER(:source) AS s
ON e.id = s.id AND e.t = s.t AND e.op = s.op
WHEN NOT MATCHED THEN INSERT *
