UPDATE heartq_fair_finishes AS f
SET waiting = max(0, f.waiting - x.n), served = max(f.served, x.served),
    finish = CASE WHEN f.waiting - x.n <= 0 THEN max(f.served, x.served) ELSE f.finish END
FROM (SELECT json_extract(value, '$[0]') AS queue, json_extract(value, '$[1]') AS priority,
             json_extract(value, '$[2]') AS fair_key, json_extract(value, '$[3]') AS n,
             json_extract(value, '$[4]') AS served
      FROM json_each(:left)) AS x
WHERE f.queue = x.queue AND f.priority = x.priority AND f.fair_key = x.fair_key
