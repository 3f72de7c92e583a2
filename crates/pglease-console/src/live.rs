//! `GET /api/events?view=...`: the view a page shows, pushed as a Server-Sent Event (`view`) every
//! refresh for as long as the page keeps the stream open (the page's pause button closes it). A
//! read that fails is pushed as a `notice` event (e.g. the statement timeout passed) and the
//! stream goes on; the page shows the notice over the last data it had.
//!
//! Each stream reads for itself: N open pages cost N reads per refresh, each bounded by the
//! statement timeout. The queue view's reads also sample the consumed/s charts (sampler.rs).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State as Extract};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::State;
use crate::api::{self, LeaseFilter};
use crate::db::DbError;

#[derive(Debug, Deserialize, Clone)]
pub struct EventParams {
    view: String,
    #[serde(flatten)]
    filter: LeaseFilter,
    key: Option<String>,
    queue: Option<String>,
}

/// One read of a view, as the event's JSON: `Ok` data or `Err` notice.
async fn read(state: &State, p: &EventParams) -> Result<Value, Value> {
    let as_json =
        |r: Result<Value, crate::db::DbError>| r.map_err(|e| json!({ "message": e.to_string() }));
    match p.view.as_str() {
        "leases" => as_json(
            api::lease_page(state, &p.filter)
                .await
                .map(|page| serde_json::to_value(page).unwrap_or(Value::Null)),
        ),
        "lease" => {
            let key = p.key.clone().unwrap_or_default();
            as_json(
                state
                    .db
                    .lease(&key, 50)
                    .await
                    .map(|d| serde_json::to_value(d).unwrap_or(Value::Null)),
            )
        }
        "semaphores" => as_json(
            state
                .db
                .semaphores(1000)
                .await
                .map(|rows| json!({ "items": rows })),
        ),
        "elections" => as_json(
            state
                .db
                .elections(&state.elections, 1000)
                .await
                .map(|rows| json!({ "items": rows, "configured": state.elections })),
        ),
        "queues" | "queue" => {
            let rows = api::queue_rows(state).await;
            let dead = match (&rows, p.queue.as_deref(), p.view.as_str()) {
                (Ok(_), Some(q), "queue") => {
                    Some(state.db.dead_letters(q, 100, state.show_payloads).await)
                }
                _ => None,
            };
            match (rows, dead) {
                (Ok(rows), None) => Ok(json!({ "items": rows })),
                (Ok(rows), Some(Ok(dead))) => Ok(json!({ "items": rows, "dead_letters": dead })),
                // A role that may not consume the queue sees its counts, not its dead letters.
                (Ok(rows), Some(Err(DbError::NotPermitted(why)))) => {
                    Ok(json!({ "items": rows, "dead_letters_hidden": why }))
                }
                (Err(e), _) | (_, Some(Err(e))) => Err(json!({ "message": e.to_string() })),
            }
        }
        _ => Err(json!({ "message": "unknown view" })),
    }
}

pub async fn events(
    Extract(state): Extract<Arc<State>>,
    Query(params): Query<EventParams>,
) -> Response {
    if !matches!(
        params.view.as_str(),
        "leases" | "lease" | "semaphores" | "elections" | "queues" | "queue"
    ) {
        return api::error(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid",
            "view must be leases, lease, semaphores, elections, queues or queue",
        );
    }
    Sse::new(stream(state, params))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn stream(
    state: Arc<State>,
    params: EventParams,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let refresh = state.refresh;
    let shutdown = state.shutdown.clone();
    stream::unfold((state, params, true), move |(state, params, first)| {
        let shutdown = shutdown.clone();
        async move {
            if !first {
                tokio::select! {
                    _ = tokio::time::sleep(refresh) => {}
                    _ = shutdown.cancelled() => return None,
                }
            }
            let event = match read(&state, &params).await {
                Ok(data) => Event::default().event("view").data(data.to_string()),
                Err(notice) => Event::default().event("notice").data(notice.to_string()),
            };
            Some((Ok(event), (state, params, false)))
        }
    })
}

#[cfg(test)]
mod tests {
    use axum::extract::Query;

    use super::EventParams;

    #[test]
    fn the_stream_takes_the_lease_filters_of_the_page_url_limit_included() {
        let uri = "/api/events?view=leases&prefix=a%2F&state=held&limit=2"
            .parse()
            .unwrap();
        let Query(p) = Query::<EventParams>::try_from_uri(&uri).expect("parameters");
        assert_eq!(p.view, "leases");
        assert_eq!(p.filter.prefix.as_deref(), Some("a/"));
        assert_eq!(p.filter.query().expect("a query").get_limit(), 2);
        let uri = "/api/events?view=leases&limit=many".parse().unwrap();
        let Query(p) = Query::<EventParams>::try_from_uri(&uri).expect("parameters");
        assert!(p.filter.query().is_err(), "an invalid limit is refused");
    }
}
