SELECT status FROM lease.renew('w1r-' || :client_id, 'w1', 1, interval '1 hour');
