//! A `tracing` layer that captures every event with its fields and the spans it is in, for the
//! observability tests to query.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::common::eventually;

/// The fields of an event or span, as text.
#[derive(Debug, Clone, Default)]
pub(super) struct Fields(BTreeMap<String, String>);

impl Fields {
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// One captured event, with the spans it was in (innermost first).
#[derive(Debug, Clone)]
pub(super) struct Captured {
    pub(super) target: String,
    pub(super) level: Level,
    pub(super) fields: Fields,
    pub(super) spans: Vec<(String, Fields)>,
}

impl Captured {
    pub(super) fn message(&self) -> &str {
        self.fields.get("message").unwrap_or("")
    }

    pub(super) fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name)
    }

    pub(super) fn span(&self, name: &str) -> Option<&Fields> {
        self.spans.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// Whether the event names `key`, `owner` and (if given) `epoch` as fields of its own.
    pub(super) fn is_about(&self, key: &str, owner: &str, epoch: Option<i64>) -> bool {
        self.field("key") == Some(key)
            && self.field("owner") == Some(owner)
            && epoch.is_none_or(|e| self.field("epoch") == Some(e.to_string().as_str()))
    }
}

/// A layer that keeps every event (and its spans' fields) in a shared list.
#[derive(Clone, Default)]
pub(super) struct Capture(Arc<Mutex<Vec<Captured>>>);

impl Capture {
    /// Installs the capture as this thread's default subscriber until the guard is dropped.
    pub(super) fn install() -> (Capture, tracing::subscriber::DefaultGuard) {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        (capture, tracing::subscriber::set_default(subscriber))
    }

    pub(super) fn events(&self) -> Vec<Captured> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The first event on `target` with `message` about `key` (a field of the event).
    pub(super) fn find(&self, target: &str, message: &str, key: &str) -> Option<Captured> {
        self.events()
            .into_iter()
            .find(|e| e.target == target && e.message() == message && e.field("key") == Some(key))
    }

    /// Waits (bounded) for the event [`Capture::find`] finds.
    pub(super) async fn wait_for(&self, target: &str, message: &str, key: &str) -> Captured {
        let what = format!("{target}: {message:?} for {key}");
        eventually(&what, Duration::from_secs(15), || async {
            self.find(target, message, key)
        })
        .await
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let spans = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .map(|span| {
                        let fields = span.extensions().get::<Fields>().cloned();
                        (span.name().to_owned(), fields.unwrap_or_default())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let meta = event.metadata();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Captured {
                target: meta.target().to_owned(),
                level: *meta.level(),
                fields,
                spans,
            });
    }
}

/// Asserts that no event about `key` was logged at `error`.
pub(super) fn assert_nothing_at_error(capture: &Capture, key: &str) {
    let errors: Vec<_> = capture
        .events()
        .into_iter()
        .filter(|e| e.level == Level::ERROR && e.field("key") == Some(key))
        .collect();
    assert!(errors.is_empty(), "events at error: {errors:#?}");
}
