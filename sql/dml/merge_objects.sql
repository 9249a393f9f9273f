-- Insert-only merge on the object id: replaying a file changes nothing.
MERGE INTO IDENTIFIER(:target) AS o
USING IDENTIFIER(:source) AS s
ON o.id = s.id
WHEN NOT MATCHED THEN INSERT *
