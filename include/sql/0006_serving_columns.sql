-- v6: serving figures that real tools print and v2 had no column for: the configured request rate
-- (requests/s; NULL where the output does not say it, infinite rates are stored as NULL with a note),
-- vLLM's request goodput (req/s) and the speculative-decoding acceptance length (tokens per step).

ALTER TABLE serving_results ADD COLUMN request_rate DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN goodput DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN accept_length DOUBLE PRECISION;
