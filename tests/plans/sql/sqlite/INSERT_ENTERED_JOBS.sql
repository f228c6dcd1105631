INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, fair_key, fair_weight, meta, expires_at)
SELECT json_extract(x.value, '$.id'), json_extract(x.value, '$.task'),
       json_extract(x.value, '$.queue'), json_extract(x.value, '$.args'),
       json_extract(x.value, '$.priority'), 'queued', :now + json_extract(x.value, '$.delay'),
       json_extract(x.value, '$.max_retries'), json_extract(x.value, '$.retry_backoff'),
       json_extract(x.value, '$.retry_backoff_max'), json_extract(x.value, '$.chosen'),
       :now, :now, json_extract(x.value, '$.concurrency_key'),
       json_extract(x.value, '$.concurrency_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_period'),
       json_extract(x.value, '$.fair_key'), json_extract(x.value, '$.fair_weight'),
       json_extract(x.value, '$.meta'), :now + json_extract(x.value, '$.expires_in')
FROM json_each(:jobs) AS x
