INSERT INTO heartq_fair_finishes (queue, priority, fair_key, finish, waiting, served)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), 0.0
FROM json_each(:finishes) WHERE true
ON CONFLICT (queue, priority, fair_key) DO UPDATE
SET finish = max(finish, excluded.finish), waiting = waiting + excluded.waiting
