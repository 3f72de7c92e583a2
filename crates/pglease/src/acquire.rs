//! [`AcquireBuilder`]: an acquire with options ([`Client::acquire_with`]), for what the plain
//! [`Client::try_acquire`] and [`Client::acquire`] do not take: the lease's data.

use std::time::Duration;

use crate::client::Client;
use crate::deadline::Deadline;
use crate::error::Result;
use crate::lease::Lease;
use crate::target::Target;

/// An acquire of one key with options, made by [`Client::acquire_with`]; send it with
/// [`AcquireBuilder::try_acquire`] (at once) or [`AcquireBuilder::acquire`] (waiting).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let request = client.acquire_with("job-42", Duration::from_secs(30)).data(r#"{"host":"a1"}"#);
/// if let Some(lease) = request.try_acquire().await? {
///     println!("mine at epoch {}, data {:?}", lease.epoch(), lease.data());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an AcquireBuilder does nothing until try_acquire or acquire is called"]
pub struct AcquireBuilder {
    client: Client,
    key: String,
    ttl: Duration,
    data: Option<String>,
}

impl AcquireBuilder {
    pub(crate) fn new(client: Client, key: String, ttl: Duration) -> AcquireBuilder {
        AcquireBuilder {
            client,
            key,
            ttl,
            data: None,
        }
    }

    /// Attaches `data` to the grant: a small text value (at most
    /// [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes, e.g. an address or a JSON
    /// document) that anyone who may inspect the key reads ([`Client::inspect`],
    /// [`Client::list`], [`crate::LeaseState::data`]) until the lease is released or the holder
    /// replaces it ([`Lease::set_data`]). It never affects the lease's logic. Without it the grant
    /// has no data. A grant the owner already held gets its data replaced.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: &pglease::Client) {
    /// let request = client.acquire_with("k", std::time::Duration::from_secs(5)).data("v");
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<String>) -> AcquireBuilder {
        self.data = Some(data.into());
        self
    }

    /// [`Client::try_acquire`] with these options.
    ///
    /// # Errors
    ///
    /// As [`Client::try_acquire`]; also [`crate::Error::is_invalid_input`] (client-side, nothing
    /// sent) for data over [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes.
    ///
    /// # Cancel safety
    ///
    /// As [`Client::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// let ttl = std::time::Duration::from_secs(5);
    /// let lease = client.acquire_with("k", ttl).data("v").try_acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<Lease>> {
        self.client
            .try_acquire_with_data(&self.key, self.ttl, self.data.as_deref())
            .await
    }

    /// [`Client::acquire`] with these options: waits up to `timeout` (without polling) while
    /// another owner holds the key.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`]; also [`crate::Error::is_invalid_input`] (client-side, nothing sent)
    /// for data over [`MAX_DATA_BYTES`](crate::limits::MAX_DATA_BYTES) bytes.
    ///
    /// # Cancel safety
    ///
    /// As [`Client::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &pglease::Client) -> pglease::Result<()> {
    /// use std::time::Duration;
    /// let lease = client
    ///     .acquire_with("k", Duration::from_secs(5))
    ///     .data("v")
    ///     .acquire(Duration::from_secs(30))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(self, timeout: Duration) -> Result<Lease> {
        self.client
            .acquire_target(
                &Target::Key(self.key),
                self.ttl,
                self.data.as_deref(),
                Deadline::after(timeout),
            )
            .await
    }
}
