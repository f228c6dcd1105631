UPDATE heartq_fair_finishes AS f SET waiting = max(0, f.waiting - x.n)
FROM (SELECT json_extract(value, '$[0]') AS queue, json_extract(value, '$[1]') AS priority,
             json_extract(value, '$[2]') AS fair_key, json_extract(value, '$[3]') AS n
      FROM json_each(:left)) AS x
WHERE f.queue = x.queue AND f.priority = x.priority AND f.fair_key = x.fair_key
