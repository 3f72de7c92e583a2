//! The pages: one HTML shell per view (assets/console.html) with the navigation, the console's
//! mode and its CSRF token filled in on the server; the view itself is drawn by
//! assets/console.js from the JSON of the event stream. Both files are compiled into the binary.

use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

use crate::State;

const SHELL: &str = include_str!("assets/console.html");
const LOGIN: &str = include_str!("assets/login.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// `text` with the characters that mean something in HTML escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const VIEWS: [(&str, &str, &str); 4] = [
    ("leases", "/leases", "Leases"),
    ("semaphores", "/semaphores", "Semaphores"),
    ("elections", "/elections", "Elections"),
    ("queues", "/queues", "Queues"),
];

async fn shell(state: &State, view: &str, title: &str) -> Response {
    let base = escape(&state.base_path);
    let standby = state.db.is_standby().await.unwrap_or(false);
    let actions = state.actions && !standby;
    let mode = match (state.actions, standby) {
        (_, true) => "standby: read-only",
        (false, false) => "read-only",
        (true, false) => "actions allowed",
    };
    let nav: String = VIEWS
        .iter()
        .map(|(name, path, label)| {
            let current = if view.starts_with(&name[..name.len() - 1]) {
                " class=\"current\""
            } else {
                ""
            };
            format!("<a href=\"{base}{path}\"{current}>{label}</a>")
        })
        .collect();
    let html = SHELL
        .replace("{{title}}", &escape(title))
        .replace("{{base}}", &base)
        .replace("{{view}}", view)
        .replace("{{csrf}}", &escape(state.secrets.csrf()))
        .replace("{{actions}}", if actions { "true" } else { "false" })
        .replace("{{mode}}", mode)
        .replace("{{nav}}", &nav);
    Html(html).into_response()
}

pub async fn leases(Extract(state): Extract<Arc<State>>) -> Response {
    shell(&state, "leases", "Leases").await
}

pub async fn lease(Extract(state): Extract<Arc<State>>) -> Response {
    shell(&state, "lease", "Lease").await
}

pub async fn semaphores(Extract(state): Extract<Arc<State>>) -> Response {
    shell(&state, "semaphores", "Semaphores").await
}

pub async fn elections(Extract(state): Extract<Arc<State>>) -> Response {
    shell(&state, "elections", "Elections").await
}

pub async fn queues(Extract(state): Extract<Arc<State>>) -> Response {
    shell(&state, "queues", "Queues").await
}

pub async fn queue(Extract(state): Extract<Arc<State>>) -> Response {
    shell(&state, "queue", "Queue").await
}

fn login_page(state: &State, message: &str) -> String {
    LOGIN
        .replace("{{base}}", &escape(&state.base_path))
        .replace("{{message}}", &escape(message))
}

pub async fn login(Extract(state): Extract<Arc<State>>) -> Response {
    Html(login_page(
        &state,
        "This console needs its token (from --token-file or PGLEASE_UI_TOKEN).",
    ))
    .into_response()
}

pub fn login_failed(state: &State) -> Response {
    (
        axum::http::StatusCode::UNAUTHORIZED,
        Html(login_page(state, "Wrong token.")),
    )
        .into_response()
}

pub async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        SCRIPT,
    )
        .into_response()
}

pub async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STYLE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn html_metacharacters_are_escaped() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
