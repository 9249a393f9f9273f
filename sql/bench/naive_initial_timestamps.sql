-- Naive baseline: the timestamps of the initial subscription events (t <= :t0), in order.
SELECT DISTINCT t FROM subscription_events WHERE t <= :t0 ORDER BY t
