//! The endpoints the console section requests: every page and every GET endpoint of the
//! console's API, with what the console reads for each (the report's "reads" column).

use super::seed;

/// How one endpoint is requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An HTML page (the shell; its data comes from the event stream).
    Page,
    /// A JSON (or metrics) answer.
    Api,
    /// An event stream: time to the first `view` event.
    Events,
}

pub struct Endpoint {
    pub name: &'static str,
    pub path: String,
    pub kind: Kind,
    /// What the console reads for it.
    pub reads: &'static str,
}

pub fn endpoint_list() -> Vec<Endpoint> {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let e = |name, path: String, kind, reads| Endpoint {
        name,
        path,
        kind,
        reads,
    };
    use Kind::*;
    vec![
        e(
            "page /leases",
            "/leases".into(),
            Page,
            "pg_is_in_recovery()",
        ),
        e(
            "page /lease?key=",
            format!("/lease?key={}", enc(seed::DETAIL_KEY)),
            Page,
            "pg_is_in_recovery()",
        ),
        e(
            "page /semaphores",
            "/semaphores".into(),
            Page,
            "pg_is_in_recovery()",
        ),
        e(
            "page /elections",
            "/elections".into(),
            Page,
            "pg_is_in_recovery()",
        ),
        e(
            "page /queues",
            "/queues".into(),
            Page,
            "pg_is_in_recovery()",
        ),
        e(
            "page /queue?queue=",
            format!("/queue?queue={}", seed::QUEUE),
            Page,
            "pg_is_in_recovery()",
        ),
        e(
            "api leases, first page",
            "/api/leases".into(),
            Api,
            "lease.browse (50) + lease.summary",
        ),
        e(
            "api leases, middle page (after=)",
            format!("/api/leases?after={}", enc(seed::MIDDLE_AFTER)),
            Api,
            "lease.browse (50) + lease.summary",
        ),
        e(
            "api leases, prefix filter",
            format!("/api/leases?prefix={}", enc(seed::PREFIX)),
            Api,
            "lease.browse (50) + lease.summary",
        ),
        e(
            "api leases, state=lapsed",
            "/api/leases?state=lapsed".into(),
            Api,
            "lease.browse (50) + lease.summary",
        ),
        e(
            "api leases, owner filter",
            format!("/api/leases?owner={}", enc(seed::OWNER)),
            Api,
            "lease.browse (50) + lease.summary",
        ),
        e(
            "api leases, owner holding 1 key",
            format!("/api/leases?owner={}", enc(seed::ELECTION_OWNER)),
            Api,
            "lease.browse (reads every key) + lease.summary",
        ),
        e(
            "api lease?key=",
            format!("/api/lease?key={}", enc(seed::DETAIL_KEY)),
            Api,
            "lease.browse (1) + lease.history (50)",
        ),
        e(
            "api semaphores",
            "/api/semaphores".into(),
            Api,
            "semaphores query",
        ),
        e(
            "api elections",
            "/api/elections".into(),
            Api,
            "lease.browse + lease.history per election",
        ),
        e(
            "api queues",
            "/api/queues".into(),
            Api,
            "list_queues + lease_queue.status + privileges",
        ),
        e(
            "api dead letters",
            format!("/api/queues/{}/dead-letters", seed::QUEUE),
            Api,
            "lease_queue.list_dead_letters (100)",
        ),
        e(
            "metrics",
            "/metrics".into(),
            Api,
            "summary + semaphores + elections + queues",
        ),
        e(
            "events leases: first view",
            "/api/events?view=leases".into(),
            Events,
            "as api leases, first page",
        ),
        e(
            "events queues: first view",
            "/api/events?view=queues".into(),
            Events,
            "as api queues",
        ),
    ]
}
