//! What the client saw: every event the pglease library logs (targets `pglease::*`, every level),
//! recorded with the instant it was logged, through a process-wide `tracing` subscriber. The
//! keepalive logs each renewal (`lease renewed`, or `lease renewed after failed renewals`), each
//! failed one with its error (`lease renewal failed, retrying`), and the loss (`lease lost`); see
//! docs/CLIENT.md, "Observability". A test reads the events of its own keys.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One logged event.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

impl Event {
    /// A field's recorded value (`Debug` form for non-strings), if the event has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

static EVENTS: Mutex<Vec<Event>> = Mutex::new(Vec::new());

struct Recorder;

#[derive(Default)]
struct Fields {
    message: String,
    fields: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.fields
                .insert(field.name().to_owned(), value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.fields.insert(field.name().to_owned(), text);
        }
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target().starts_with("pglease")
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        EVENTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Event {
                at: Instant::now(),
                message: fields.message,
                fields: fields.fields,
            });
    }
}

/// Starts recording (once per process; later calls do nothing).
pub fn install() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Recorder))
            .expect("no other tracing subscriber in this test binary");
    });
}

/// Every event recorded so far about `key` (its `key` field), in order.
pub fn of_key(key: &str) -> Vec<Event> {
    EVENTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|e| e.field("key") == Some(key))
        .cloned()
        .collect()
}

/// What the keepalive of one lease went through, from its events.
#[derive(Debug, Default)]
pub struct Renewals {
    /// When each confirmed renewal was logged.
    pub confirmed: Vec<Instant>,
    /// Each failed renewal: when, and its error (with the SQLSTATE, if the server sent one).
    pub failed: Vec<(Instant, String)>,
    /// The reason of a `lease lost` event, if there was one.
    pub lost: Option<(Instant, String)>,
}

impl Renewals {
    pub fn of(key: &str) -> Renewals {
        let mut r = Renewals::default();
        for e in of_key(key) {
            match e.message.as_str() {
                "lease renewed" | "lease renewed after failed renewals" => r.confirmed.push(e.at),
                "lease renewal failed, retrying" => {
                    let mut error = e.field("error").unwrap_or("?").to_owned();
                    if let Some(code) = e.field("sqlstate") {
                        let _ = write!(error, " [{code}]");
                    }
                    r.failed.push((e.at, error));
                }
                "lease lost" => {
                    r.lost
                        .get_or_insert((e.at, e.field("reason").unwrap_or("?").to_owned()));
                }
                _ => {}
            }
        }
        r
    }

    /// Confirmed renewals logged after `t`.
    pub fn confirmed_after(&self, t: Instant) -> Vec<Instant> {
        self.confirmed.iter().copied().filter(|&c| c > t).collect()
    }

    /// The failed renewals' distinct errors with how often each occurred, most frequent first.
    pub fn error_kinds(&self) -> Vec<(usize, String)> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, e) in &self.failed {
            *counts.entry(e).or_default() += 1;
        }
        let mut kinds: Vec<(usize, String)> =
            counts.into_iter().map(|(e, n)| (n, e.to_owned())).collect();
        kinds.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        kinds
    }
}
