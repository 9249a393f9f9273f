-- Record processed timestamps once (a replayed run finds them present and changes nothing).
MERGE INTO IDENTIFIER(:target) AS l
USING IDENTIFIER(:source) AS s
ON l.t = s.t
WHEN NOT MATCHED THEN INSERT *
