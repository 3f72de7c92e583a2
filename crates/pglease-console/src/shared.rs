//! One read for all who wait for it: requests that want the same whole-table read while one is
//! in flight take its result instead of each starting their own. The semaphores view reads
//! every key (`lease.list`: the database has no index of semaphores), about 100 ms at 100 000
//! keys, and the queues view counts every partition's backlog (`lease_queue.status`, about
//! 115 ms at 1 000 000 messages); four pages, scrapes or API calls at once would run four such
//! reads side by side on the server. Shared, they run one, and each gets an answer read after
//! it asked (no result is kept for later requests: a request that finds no read in flight
//! starts its own).

use std::time::Instant;

use tokio::sync::Mutex;

use crate::db::DbError;

/// A read's result, with the instant it completed and the argument it was read with.
type Done<K, T> = (Instant, K, Result<T, DbError>);

/// The last read of a kind.
pub struct Shared<K, T> {
    last: Mutex<Option<Done<K, T>>>,
}

impl<K, T> Default for Shared<K, T> {
    fn default() -> Self {
        Shared {
            last: Mutex::new(None),
        }
    }
}

impl<K: PartialEq, T: Clone> Shared<K, T> {
    /// The result of a read of `key` that completed after this call began (one that was in
    /// flight when it began: the call waits for it), else of `read()`, run now. Reads run one at
    /// a time, in the order asked (the lock is fair).
    pub async fn read<F>(&self, key: K, read: impl FnOnce() -> F) -> Result<T, DbError>
    where
        F: Future<Output = Result<T, DbError>>,
    {
        let asked = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((done, k, result)) = last.as_ref()
            && *done >= asked
            && *k == key
        {
            return result.clone();
        }
        let result = read().await;
        *last = Some((Instant::now(), key, result.clone()));
        result
    }
}

#[cfg(test)]
mod tests {
    //! On tokio's paused clock: a sleep ends only when every task is idle, so "while the first
    //! read is in flight" and "after it completed" are orders of events, not wall-clock guesses.
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn callers_during_a_read_share_it_and_later_callers_read_again() {
        let shared: Arc<Shared<u32, u32>> = Arc::default();
        let reads = Arc::new(AtomicU32::new(0));
        let call = |shared: Arc<Shared<u32, u32>>, reads: Arc<AtomicU32>| async move {
            shared
                .read(1, || async {
                    let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(n)
                })
                .await
        };
        // The first caller reads; the three that ask while it reads take its result.
        let first = tokio::spawn(call(shared.clone(), reads.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let others: Vec<_> = (0..3)
            .map(|_| tokio::spawn(call(shared.clone(), reads.clone())))
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), 1);
        for o in others {
            assert_eq!(o.await.unwrap().unwrap(), 1);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // A caller after the read completed reads anew.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(call(shared.clone(), reads.clone()).await.unwrap(), 2);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_error_is_shared_too_and_another_key_is_read_for_itself() {
        let shared: Arc<Shared<u32, u32>> = Arc::default();
        let slow_error = |shared: Arc<Shared<u32, u32>>| async move {
            shared
                .read(1, || async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(DbError::Timeout(Duration::from_millis(100)))
                })
                .await
        };
        let first = tokio::spawn(slow_error(shared.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiter = tokio::spawn({
            let shared = shared.clone();
            async move { shared.read(1, || async { Ok(7) }).await }
        });
        let other_key = tokio::spawn({
            let shared = shared.clone();
            async move { shared.read(2, || async { Ok(9) }).await }
        });
        assert!(matches!(first.await.unwrap(), Err(DbError::Timeout(_))));
        assert!(matches!(waiter.await.unwrap(), Err(DbError::Timeout(_))));
        assert_eq!(other_key.await.unwrap().unwrap(), 9);
    }
}
