INSERT INTO heartq_fair_clocks (queue, priority, clock)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(:clocks) WHERE true
ON CONFLICT (queue, priority) DO UPDATE SET clock = max(clock, excluded.clock)
