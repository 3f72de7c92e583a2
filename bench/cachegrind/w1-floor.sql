BEGIN;
INSERT INTO pglease_bench.floor AS l (key, owner, epoch, expires_at)
     VALUES ('w1-' || :client_id, 'w1', 1, clock_timestamp() + interval '30 seconds')
ON CONFLICT (key) DO UPDATE
        SET owner = excluded.owner, epoch = l.epoch + 1, expires_at = excluded.expires_at,
            waiting = false
      WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp()
  RETURNING l.epoch \gset
UPDATE pglease_bench.floor AS l SET expires_at = clock_timestamp() + interval '30 seconds'
 WHERE l.key = 'w1-' || :client_id AND l.owner = 'w1' AND l.epoch = :epoch
   AND l.expires_at > clock_timestamp();
UPDATE pglease_bench.floor AS l SET owner = NULL, epoch = l.epoch + 1, expires_at = clock_timestamp()
 WHERE l.key = 'w1-' || :client_id AND l.owner = 'w1' AND l.epoch = :epoch AND l.expires_at > clock_timestamp();
END;
