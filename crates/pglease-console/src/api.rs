//! The console's routes: the pages, the JSON API they use (docs/CONSOLE.md), the event stream,
//! the login, `/metrics`, and the guard in front of them all (auth.rs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, Request, State as Extract};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::State;
use crate::auth::{self, Proof};
use crate::db::DbError;
use crate::views::{LeasePage, QueueRow};
use crate::{live, metrics, page};

/// Every route, under the base path (each path prefixed with it rather than a nested router: a
/// nested router's `/` answers only at `/base`, and the URL `pglease ui` prints, `/base/`, was a
/// 404). `/base` itself redirects to `/base/`.
pub fn routes(state: Arc<State>) -> Router {
    let base = state.base_path.clone();
    let at = |path: &str| format!("{base}{path}");
    let mut router = if state.metrics_only {
        Router::new().route(&at("/metrics"), get(metrics::scrape))
    } else {
        Router::new()
            .route(&at("/"), get(page::leases))
            .route(&at("/leases"), get(page::leases))
            .route(&at("/lease"), get(page::lease))
            .route(&at("/semaphores"), get(page::semaphores))
            .route(&at("/elections"), get(page::elections))
            .route(&at("/queues"), get(page::queues))
            .route(&at("/queue"), get(page::queue))
            .route(&at("/login"), get(page::login).post(login))
            .route(&at("/assets/console.js"), get(page::script))
            .route(&at("/assets/console.css"), get(page::style))
            .route(&at("/api/info"), get(info))
            .route(&at("/api/leases"), get(leases))
            .route(&at("/api/lease"), get(lease))
            .route(&at("/api/semaphores"), get(semaphores))
            .route(&at("/api/elections"), get(elections))
            .route(&at("/api/queues"), get(queues))
            .route(&at("/api/queues/{queue}/dead-letters"), get(dead_letters))
            .route(&at("/api/queues/{queue}/redrive"), post(redrive))
            .route(
                &at("/api/queues/{queue}/partitions/{partition}/force-release"),
                post(force_release),
            )
            .route(&at("/api/purge"), post(purge))
            .route(&at("/api/events"), get(live::events))
            .route(&at("/metrics"), get(metrics::scrape))
    };
    if !base.is_empty() && !state.metrics_only {
        let to = format!("{base}/");
        router = router.route(
            &base,
            get(move || {
                let to = to.clone();
                async move { Redirect::permanent(&to) }
            }),
        );
    }
    router
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::map_response(security_headers))
        .with_state(state)
}

/// Every answer: no framing by other sites, no sniffing, no referrer to elsewhere, no caching of
/// what the database said.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Lets a request in if it proves itself (auth.rs); without a token, only with a loopback
/// `Host`. The proof is passed on for the CSRF checks of actions.
async fn guard(Extract(state): Extract<Arc<State>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let local = path
        .strip_prefix(state.base_path.as_str())
        .unwrap_or(&path)
        .to_owned();
    if !state.secrets.requires_auth() && !auth::host_is_loopback(req.headers()) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "pglease console: this console has no token and answers only to a loopback Host \
             (localhost, 127.0.0.1, [::1])\n",
        )
            .into_response();
    }
    match state.secrets.proof(req.headers()) {
        Some(proof) => {
            req.extensions_mut().insert(proof);
            next.run(req).await
        }
        None if local == "/login" || local.starts_with("/assets/") => {
            req.extensions_mut().insert(Proof::Open);
            next.run(req).await
        }
        None if local.starts_with("/api/") || local == "/metrics" => {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a token is required",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"pglease console\""),
            );
            r
        }
        None => {
            let mut r = Redirect::to(&format!("{}/login", state.base_path)).into_response();
            *r.status_mut() = StatusCode::SEE_OTHER;
            r
        }
    }
}

/// A JSON error: `{"error": kind, "message": ...}`.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (status, Json(json!({ "error": kind, "message": message }))).into_response()
}

impl IntoResponse for DbError {
    fn into_response(self) -> Response {
        let message = self.to_string();
        match self {
            DbError::Timeout(_) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "statement_timeout",
                &message,
            ),
            DbError::NotPermitted(_) => error(StatusCode::FORBIDDEN, "not_permitted", &message),
            DbError::Invalid(_) => error(StatusCode::BAD_REQUEST, "invalid", &message),
            DbError::NoSuchQueue(_) => error(StatusCode::NOT_FOUND, "no_such_queue", &message),
            DbError::Conflict(_) => error(StatusCode::CONFLICT, "conflict", &message),
            DbError::Other(_) => error(StatusCode::BAD_GATEWAY, "database", &message),
        }
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// `POST /login`: the token typed into the login page; sets the session cookie.
async fn login(Extract(state): Extract<Arc<State>>, Form(form): Form<LoginForm>) -> Response {
    if !state.secrets.requires_auth() {
        return Redirect::to(&format!("{}/", state.base_path)).into_response();
    }
    if !state.secrets.is_token(&form.token) {
        tracing::warn!(target: "pglease_console::auth", "login refused: wrong token");
        return page::login_failed(&state).into_response();
    }
    let path = if state.base_path.is_empty() {
        "/"
    } else {
        &state.base_path
    };
    let cookie = format!(
        "{}={}; Path={path}; HttpOnly; SameSite=Strict",
        auth::COOKIE,
        state.secrets.session()
    );
    let mut r = Redirect::to(&format!("{}/", state.base_path)).into_response();
    *r.status_mut() = StatusCode::SEE_OTHER;
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a cookie of hex digits"),
    );
    r
}

/// `GET /api/info`: the console's mode, and the CSRF token for actions.
async fn info(Extract(state): Extract<Arc<State>>) -> Response {
    let standby = state.db.is_standby().await;
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "actions": state.actions && matches!(standby, Ok(false)),
        "read_only": !state.actions,
        "standby": standby.as_ref().ok(),
        "show_payloads": state.show_payloads,
        "refresh_ms": state.refresh.as_millis() as u64,
        "statement_timeout_ms": state.db.timeout().as_millis() as u64,
        "csrf_token": state.secrets.csrf(),
    }))
    .into_response()
}

/// The filters of `GET /api/leases` (and of its event stream).
#[derive(Debug, Default, Deserialize, Clone)]
pub struct LeaseFilter {
    pub prefix: Option<String>,
    pub after: Option<String>,
    pub state: Option<String>,
    pub owner: Option<String>,
    /// Text, parsed by [`LeaseFilter::query`]: the event stream's parameters flatten this struct,
    /// and serde hands a flattened field only strings (a `u32` here refused every `limit=`).
    pub limit: Option<String>,
}

impl LeaseFilter {
    pub fn query(&self) -> Result<pglease::BrowseQuery, DbError> {
        let limit = match self.limit.as_deref().map(str::trim) {
            None | Some("") => 50,
            Some(text) => text.parse::<u32>().map_err(|_| {
                DbError::Invalid(format!(
                    "limit must be a number of keys, 1 to 1000 (got {text:?})"
                ))
            })?,
        };
        let mut q = pglease::BrowseQuery::new().limit(limit.clamp(1, 1000));
        if let Some(p) = self.prefix.as_deref().filter(|p| !p.is_empty()) {
            q = q.prefix(p);
        }
        if let Some(a) = self.after.as_deref().filter(|a| !a.is_empty()) {
            q = q.after(a);
        }
        if let Some(o) = self.owner.as_deref().filter(|o| !o.is_empty()) {
            q = q.owner(o);
        }
        match self.state.as_deref() {
            None | Some("") | Some("all") => {}
            Some("held") => q = q.state(pglease::KeyState::Held),
            Some("lapsed") => q = q.state(pglease::KeyState::Lapsed),
            Some("free") => q = q.state(pglease::KeyState::Free),
            Some(other) => {
                return Err(DbError::Invalid(format!(
                    "state must be held, lapsed, free or all (got {other:?})"
                )));
            }
        }
        Ok(q)
    }
}

pub async fn lease_page(state: &State, filter: &LeaseFilter) -> Result<LeasePage, DbError> {
    state
        .db
        .leases(&filter.query()?, state.expiring_within)
        .await
}

async fn leases(
    Extract(state): Extract<Arc<State>>,
    Query(filter): Query<LeaseFilter>,
) -> Response {
    match lease_page(&state, &filter).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize, Clone)]
pub struct KeyParam {
    pub key: String,
}

async fn lease(Extract(state): Extract<Arc<State>>, Query(p): Query<KeyParam>) -> Response {
    match state.db.lease(&p.key, 50).await {
        Ok(Some(detail)) => Json(detail).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, "no_such_key", "no such key"),
        Err(e) => e.into_response(),
    }
}

async fn semaphores(Extract(state): Extract<Arc<State>>) -> Response {
    match state.db.semaphores(1000).await {
        Ok(rows) => Json(json!({ "items": rows })).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn elections(Extract(state): Extract<Arc<State>>) -> Response {
    match state.db.elections(&state.elections, 1000).await {
        Ok(rows) => Json(json!({ "items": rows, "configured": state.elections })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Every queue with its partitions and its consumed/s chart (which this read samples).
pub async fn queue_rows(state: &State) -> Result<Vec<QueueRow>, DbError> {
    let mut rows = state.db.queues().await?;
    let acked: Vec<(String, i64)> = rows
        .iter()
        .filter_map(|q| Some((q.name.clone(), q.acked()?)))
        .collect();
    let mut rates = state.sampler.record(Instant::now(), &acked);
    for q in &mut rows {
        q.consumed_per_s = rates.remove(&q.name).unwrap_or_default();
    }
    Ok(rows)
}

async fn queues(Extract(state): Extract<Arc<State>>) -> Response {
    match queue_rows(&state).await {
        Ok(rows) => Json(json!({ "items": rows })).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct DeadLetterParams {
    limit: Option<i32>,
}

async fn dead_letters(
    Extract(state): Extract<Arc<State>>,
    Path(queue): Path<String>,
    Query(p): Query<DeadLetterParams>,
) -> Response {
    let max = p.limit.unwrap_or(100).clamp(1, 10000);
    match state
        .db
        .dead_letters(&queue, max, state.show_payloads)
        .await
    {
        Ok(rows) => {
            Json(json!({ "items": rows, "payloads_shown": state.show_payloads })).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// Whether an action may run: the console allows actions, the request passes the CSRF checks,
/// and the server is not a standby. The refusal otherwise (403).
async fn may_act(state: &State, proof: Proof, headers: &HeaderMap) -> Result<(), Response> {
    if !state.actions {
        return Err(error(
            StatusCode::FORBIDDEN,
            "read_only",
            "this console is read-only (start it with --allow-actions to act)",
        ));
    }
    if !state.secrets.csrf_ok(proof, headers) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "csrf",
            "missing or wrong X-CSRF-Token, or a foreign Origin",
        ));
    }
    match state.db.is_standby().await {
        Ok(false) => Ok(()),
        Ok(true) => Err(error(
            StatusCode::FORBIDDEN,
            "standby",
            "the server is a standby: the console is read-only there",
        )),
        Err(e) => Err(e.into_response()),
    }
}

#[derive(Deserialize, Default)]
struct RedriveBody {
    key: Option<String>,
}

async fn redrive(
    Extract(state): Extract<Arc<State>>,
    Extension(proof): Extension<Proof>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    body: Option<Json<RedriveBody>>,
) -> Response {
    if let Err(r) = may_act(&state, proof, &headers).await {
        return r;
    }
    let key = body.and_then(|Json(b)| b.key);
    match state.db.redrive(&queue, key.as_deref()).await {
        Ok(moved) => {
            tracing::info!(target: "pglease_console::action", action = "redrive", queue,
                           key = key.as_deref().unwrap_or("*"), moved, "dead letters redriven");
            Json(json!({ "redriven": moved })).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn force_release(
    Extract(state): Extract<Arc<State>>,
    Extension(proof): Extension<Proof>,
    Path((queue, partition)): Path<(String, i32)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = may_act(&state, proof, &headers).await {
        return r;
    }
    match state.db.force_release_partition(&queue, partition).await {
        Ok(epoch) => {
            tracing::info!(target: "pglease_console::action", action = "force_release", queue,
                           partition, ended_epoch = epoch, "queue partition force-released");
            Json(json!({ "ended_epoch": epoch })).into_response()
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct PurgeBody {
    /// A duration such as `1h` or `7d`.
    older_than: String,
}

async fn purge(
    Extract(state): Extract<Arc<State>>,
    Extension(proof): Extension<Proof>,
    headers: HeaderMap,
    Json(body): Json<PurgeBody>,
) -> Response {
    if let Err(r) = may_act(&state, proof, &headers).await {
        return r;
    }
    let older_than: Duration = match humantime::parse_duration(&body.older_than) {
        Ok(d) => d,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("older_than: {e} (e.g. 1h, 7d)"),
            );
        }
    };
    match state.db.purge(older_than).await {
        Ok(purged) => {
            tracing::info!(target: "pglease_console::action", action = "purge",
                           older_than = %body.older_than, purged, "keys purged");
            Json(json!({ "purged": purged })).into_response()
        }
        Err(e) => e.into_response(),
    }
}
