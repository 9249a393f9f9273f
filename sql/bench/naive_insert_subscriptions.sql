-- Naive baseline: the subscriptions inserted at timestamp :t, one row per keyword.
INSERT INTO IDENTIFIER(:subscriptions)
SELECT id, x, y, k, explode(keywords) FROM subscription_events WHERE op = 'insert' AND t = :t
