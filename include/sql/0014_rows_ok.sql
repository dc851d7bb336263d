-- v14: how many of a run's rows were judged ok (validity: not noisy, throttled or contended), beside rows_loaded.
-- A run that finished with every row contended is valid as a run but measured nothing usable: it is never the
-- latest valid run (views.sql). NULL for runs loaded before v14, read as rows_loaded.

ALTER TABLE runs ADD COLUMN rows_ok INTEGER;
