//! Who may use the console, and which requests may change something.
//!
//! - **Authentication**, when the console has a token (required to listen off loopback): a request
//!   carries it as `Authorization: Bearer TOKEN`, as the password of `Authorization: Basic` (any
//!   user name; for Prometheus' `basic_auth`), or as the session cookie that `POST /login` sets
//!   after the token was typed into the login page (HttpOnly, SameSite=Strict, valid until the
//!   console stops). Compared in constant time.
//! - **Host check**, when it has none (loopback only): the `Host` header must name a loopback
//!   address or `localhost`, so that a web page that rebinds its own DNS name to 127.0.0.1 cannot
//!   read the console through the visitor's browser.
//! - **CSRF**: every POST needs the header `X-CSRF-Token` with the console's token for forms (in
//!   the page, and in `GET /api/info`, which another site's page cannot read), unless it is
//!   authenticated with `Bearer` (which a browser never sends on its own); and an `Origin`
//!   header, when present, must be the console's own.

use axum::http::{HeaderMap, header};
use base64::Engine as _;

/// A secret: random bytes as 64 hex digits.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal, in time that does not depend on where they differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The name of the session cookie.
pub const COOKIE: &str = "pglease_console";

/// The console's secrets: the access token (if any), the session cookie's value it issues after
/// a login, and the CSRF token of its forms.
pub struct Secrets {
    token: Option<String>,
    session: String,
    csrf: String,
}

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// No token is configured (loopback only).
    Open,
    /// `Authorization: Bearer`: not sent by a browser on its own, so no CSRF check is needed.
    Bearer,
    /// Basic auth or the session cookie: a browser sends these on its own.
    Ambient,
}

impl Secrets {
    /// Fresh session and CSRF secrets; `token`, if any, required of every request.
    pub fn new(token: Option<String>) -> Secrets {
        Secrets {
            token,
            session: random_secret(),
            csrf: random_secret(),
        }
    }

    /// Whether requests must carry the token.
    pub fn requires_auth(&self) -> bool {
        self.token.is_some()
    }

    /// The CSRF token of this console's forms.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The session cookie's value, issued after a login.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Whether `typed` is the token (for the login form).
    pub fn is_token(&self, typed: &str) -> bool {
        self.token
            .as_deref()
            .is_some_and(|t| same(t.as_bytes(), typed.as_bytes()))
    }

    /// How the request proves itself, or `None` if it does not.
    pub fn proof(&self, headers: &HeaderMap) -> Option<Proof> {
        let Some(token) = self.token.as_deref() else {
            return Some(Proof::Open);
        };
        for value in headers.get_all(header::AUTHORIZATION) {
            let Ok(value) = value.to_str() else { continue };
            if let Some(bearer) = value.strip_prefix("Bearer ") {
                if same(bearer.trim().as_bytes(), token.as_bytes()) {
                    return Some(Proof::Bearer);
                }
            } else if let Some(basic) = value.strip_prefix("Basic ") {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(basic.trim())
                    .unwrap_or_default();
                if let Some(colon) = decoded.iter().position(|&b| b == b':')
                    && same(&decoded[colon + 1..], token.as_bytes())
                {
                    return Some(Proof::Ambient);
                }
            }
        }
        for value in headers.get_all(header::COOKIE) {
            let Ok(value) = value.to_str() else { continue };
            for pair in value.split(';') {
                if let Some((name, v)) = pair.trim().split_once('=')
                    && name == COOKIE
                    && same(v.as_bytes(), self.session.as_bytes())
                {
                    return Some(Proof::Ambient);
                }
            }
        }
        None
    }

    /// Whether a request that changes something passes the CSRF checks.
    pub fn csrf_ok(&self, proof: Proof, headers: &HeaderMap) -> bool {
        if proof == Proof::Bearer {
            return true;
        }
        let origin_ok = match (headers.get(header::ORIGIN), headers.get(header::HOST)) {
            (None, _) => true,
            (Some(origin), Some(host)) => match (origin.to_str(), host.to_str()) {
                (Ok(origin), Ok(host)) => origin
                    .split_once("://")
                    .is_some_and(|(_, authority)| authority == host),
                _ => false,
            },
            (Some(_), None) => false,
        };
        let token_ok = headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| same(v.as_bytes(), self.csrf.as_bytes()));
        origin_ok && token_ok
    }
}

/// Whether `Host` names this machine's loopback (`localhost`, `127.x.y.z`, `[::1]`), with or
/// without a port. A missing Host (HTTP/1.0) is refused.
pub fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, _)) => inner,
            None => return false,
        }
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn a_console_without_token_lets_every_request_in() {
        let s = Secrets::new(None);
        assert_eq!(s.proof(&HeaderMap::new()), Some(Proof::Open));
    }

    #[test]
    fn the_token_is_accepted_as_bearer_basic_password_or_after_login_as_cookie() {
        let s = Secrets::new(Some("s3cret".into()));
        assert_eq!(s.proof(&HeaderMap::new()), None);
        assert_eq!(
            s.proof(&headers(&[("authorization", "Bearer s3cret")])),
            Some(Proof::Bearer)
        );
        assert_eq!(
            s.proof(&headers(&[("authorization", "Bearer wrong")])),
            None
        );
        let basic = base64::engine::general_purpose::STANDARD.encode("prometheus:s3cret");
        assert_eq!(
            s.proof(&headers(&[("authorization", &format!("Basic {basic}"))])),
            Some(Proof::Ambient)
        );
        let wrong = base64::engine::general_purpose::STANDARD.encode("s3cret:x");
        assert_eq!(
            s.proof(&headers(&[("authorization", &format!("Basic {wrong}"))])),
            None
        );
        let cookie = format!("a=b; {COOKIE}={}", s.session());
        assert_eq!(
            s.proof(&headers(&[("cookie", &cookie)])),
            Some(Proof::Ambient)
        );
        assert_eq!(
            s.proof(&headers(&[("cookie", &format!("{COOKIE}=s3cret"))])),
            None,
            "the cookie is the session, not the token"
        );
    }

    #[test]
    fn a_post_needs_the_csrf_token_and_its_own_origin_unless_bearer() {
        let s = Secrets::new(Some("t".into()));
        let csrf = s.csrf().to_owned();
        assert!(s.csrf_ok(Proof::Bearer, &HeaderMap::new()));
        assert!(!s.csrf_ok(Proof::Ambient, &HeaderMap::new()));
        assert!(s.csrf_ok(Proof::Ambient, &headers(&[("x-csrf-token", &csrf)])));
        assert!(s.csrf_ok(
            Proof::Open,
            &headers(&[
                ("x-csrf-token", &csrf),
                ("origin", "http://127.0.0.1:8080"),
                ("host", "127.0.0.1:8080")
            ])
        ));
        assert!(!s.csrf_ok(
            Proof::Open,
            &headers(&[
                ("x-csrf-token", &csrf),
                ("origin", "http://evil.example"),
                ("host", "127.0.0.1:8080")
            ])
        ));
        assert!(!s.csrf_ok(Proof::Open, &headers(&[("x-csrf-token", "nope")])));
    }

    #[test]
    fn only_loopback_host_names_pass_the_host_check() {
        for ok in [
            "127.0.0.1:9",
            "localhost:80",
            "[::1]:8080",
            "127.0.0.2",
            "LOCALHOST",
        ] {
            assert!(host_is_loopback(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in [
            "evil.example:9",
            "10.0.0.1:80",
            "[fe80::1]:1",
            "localhost.evil:1",
        ] {
            assert!(!host_is_loopback(&headers(&[("host", bad)])), "{bad}");
        }
        assert!(!host_is_loopback(&HeaderMap::new()));
    }
}
