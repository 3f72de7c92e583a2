UPDATE pglease_bench.floor AS l SET expires_at = clock_timestamp() + interval '1 hour'
 WHERE l.key = 'w1r-' || :client_id AND l.owner = 'w1' AND l.epoch = 1
   AND l.expires_at > clock_timestamp();
