-- Quarantined rows by target and kind of reason: quoted values and numbers are masked so that
-- like reasons group ("x 'abc' is not a number" and "x '1,5' is not a number" are one kind).
SELECT target,
       regexp_replace(regexp_replace(reason, "'[^']*'", "'...'"), '[0-9]+', 'N') AS kind,
       count(*) AS n
FROM quarantine
GROUP BY 1, 2
ORDER BY n DESC, target, kind
