BEGIN;
SELECT epoch FROM lease.acquire('w1-' || :client_id, 'w1', interval '30 seconds') \gset
SELECT status FROM lease.renew('w1-' || :client_id, 'w1', :epoch, interval '30 seconds');
SELECT status FROM lease.release('w1-' || :client_id, 'w1', :epoch);
END;
