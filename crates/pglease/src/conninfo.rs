//! The two textual forms of a libpq connection string, read into keyword/value pairs:
//! `postgresql://user:password@host:port,host2/dbname?key=value` (or `postgres://`) and
//! `key=value key2='quoted value'`. What the keywords mean is [`ConnectOptions`]' business
//! (connect_options.rs); here only the syntax is, and an error says which part is wrong and
//! what form was expected.
//!
//! [`ConnectOptions`]: crate::ConnectOptions

/// The keyword/value pairs of a connection string, in order; a later pair overrides an earlier
/// one with the same keyword, as in libpq.
pub(crate) type Pairs = Vec<(String, String)>;

/// The expected forms, for error messages.
const FORMS: &str = "expected `postgresql://[user[:password]@][host][:port][,...][/dbname]\
                     [?key=value&...]` or `key=value key='quoted value' ...`";

/// Reads `text` in either form; an empty string is no pairs.
pub(crate) fn parse(text: &str) -> Result<Pairs, String> {
    let trimmed = text.trim();
    if let Some(rest) = trimmed
        .strip_prefix("postgresql://")
        .or_else(|| trimmed.strip_prefix("postgres://"))
    {
        parse_url(rest).map_err(|e| format!("invalid connection URL: {e}; {FORMS}"))
    } else if trimmed.contains("://") {
        Err(format!(
            "invalid connection string: the URL scheme must be postgresql:// or postgres://; \
             {FORMS}"
        ))
    } else {
        parse_keywords(trimmed).map_err(|e| format!("invalid connection string: {e}; {FORMS}"))
    }
}

/// The part of a URL after the scheme.
fn parse_url(rest: &str) -> Result<Pairs, String> {
    let mut pairs = Pairs::new();
    let (before_query, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => (&before_query[..i], Some(&before_query[i + 1..])),
        None => (before_query, None),
    };
    let hosts = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                pairs.push(("user".into(), decode(user, "the user name")?));
            }
            if let Some(password) = password {
                pairs.push(("password".into(), decode(password, "the password")?));
            }
            hosts
        }
        None => authority,
    };
    if !hosts.is_empty() {
        let mut names = Vec::new();
        let mut ports = Vec::new();
        for spec in hosts.split(',') {
            let (name, port) = split_host_port(spec)?;
            names.push(decode(name, "a host name")?);
            ports.push(port.to_owned());
        }
        if names.iter().any(|n| !n.is_empty()) {
            pairs.push(("host".into(), names.join(",")));
        }
        if ports.iter().any(|p| !p.is_empty()) {
            pairs.push(("port".into(), ports.join(",")));
        }
    }
    if let Some(path) = path.filter(|p| !p.is_empty()) {
        pairs.push(("dbname".into(), decode(path, "the database name")?));
    }
    for param in query.into_iter().flat_map(|q| q.split('&')) {
        if param.is_empty() {
            continue;
        }
        let Some((key, value)) = param.split_once('=') else {
            return Err(format!("query parameter {param:?} has no `=value`"));
        };
        let key = decode(key, "a query parameter's name")?;
        let value = decode(value, &format!("the value of {key}"))?;
        // libpq accepts JDBC's `ssl=true` as `sslmode=require`.
        if key == "ssl" && value == "true" {
            pairs.push(("sslmode".into(), "require".into()));
        } else {
            pairs.push((key, value));
        }
    }
    Ok(pairs)
}

/// One `host[:port]` of a URL (`[v6 address]:port` for IPv6).
fn split_host_port(spec: &str) -> Result<(&str, &str), String> {
    let (name, port) = if let Some(inner) = spec.strip_prefix('[') {
        let Some(end) = inner.find(']') else {
            return Err(format!("host {spec:?} opens `[` without closing `]`"));
        };
        let after = &inner[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(port) => port,
            None if after.is_empty() => "",
            None => {
                return Err(format!(
                    "unexpected {after:?} after the IPv6 address in {spec:?}"
                ));
            }
        };
        (&inner[..end], port)
    } else {
        match spec.rsplit_once(':') {
            Some((name, port)) => (name, port),
            None => (spec, ""),
        }
    };
    if !port.is_empty() && port.parse::<u16>().is_err() {
        return Err(format!(
            "invalid port {port:?} in host {spec:?} (a number up to 65535)"
        ));
    }
    Ok((name, port))
}

/// Percent-decodes one part of a URL; `what` names it in errors.
fn decode(text: &str, what: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!("invalid percent-encoding in {what} (`%` must be followed by two hex digits)")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{what} is not UTF-8 after percent-decoding"))
}

/// The `key=value` form: values optionally single-quoted; a backslash escapes the next character.
fn parse_keywords(text: &str) -> Result<Pairs, String> {
    let mut pairs = Pairs::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            return Err(format!("missing `=` after {key:?}"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(format!("unterminated quoted value of {key:?}")),
                    },
                    Some(c) => value.push(c),
                    None => return Err(format!("unterminated quoted value of {key:?}")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// `value` quoted for the `key=value` form.
pub(crate) fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(pairs: &'a Pairs, key: &str) -> Option<&'a str> {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_url_yields_every_part_decoded() {
        let pairs = parse(
            "postgresql://app:p%40ss@db1:5433,[::1]:5434/my%20db?sslmode=verify-full&sslrootcert=%2Fca.pem",
        )
        .unwrap();
        assert_eq!(get(&pairs, "user"), Some("app"));
        assert_eq!(get(&pairs, "password"), Some("p@ss"));
        assert_eq!(get(&pairs, "host"), Some("db1,::1"));
        assert_eq!(get(&pairs, "port"), Some("5433,5434"));
        assert_eq!(get(&pairs, "dbname"), Some("my db"));
        assert_eq!(get(&pairs, "sslmode"), Some("verify-full"));
        assert_eq!(get(&pairs, "sslrootcert"), Some("/ca.pem"));
    }

    #[test]
    fn a_url_without_host_names_none_and_a_socket_path_decodes() {
        assert_eq!(get(&parse("postgres:///app").unwrap(), "host"), None);
        let pairs = parse("postgresql://%2Fvar%2Frun%2Fpostgresql/app").unwrap();
        assert_eq!(get(&pairs, "host"), Some("/var/run/postgresql"));
    }

    #[test]
    fn jdbc_ssl_true_means_require() {
        let pairs = parse("postgresql://h/d?ssl=true").unwrap();
        assert_eq!(get(&pairs, "sslmode"), Some("require"));
    }

    #[test]
    fn keyword_values_may_be_quoted_and_escaped() {
        let pairs = parse(r"host=db password = 'it\'s' dbname='a b' user=x\ y").unwrap();
        assert_eq!(get(&pairs, "password"), Some("it's"));
        assert_eq!(get(&pairs, "dbname"), Some("a b"));
        assert_eq!(get(&pairs, "user"), Some("x y"));
    }

    #[test]
    fn errors_say_which_part_and_the_expected_form() {
        let e = parse("postgresql://h:99999/d").unwrap_err();
        assert!(
            e.contains("invalid port \"99999\"") && e.contains("postgresql://["),
            "{e}"
        );
        let e = parse("host=db dbname").unwrap_err();
        assert!(e.contains("missing `=` after \"dbname\""), "{e}");
        let e = parse("host='db").unwrap_err();
        assert!(e.contains("unterminated"), "{e}");
        let e = parse("mysql://h/d").unwrap_err();
        assert!(e.contains("scheme"), "{e}");
        let e = parse("postgresql://h/d?sslmode").unwrap_err();
        assert!(e.contains("no `=value`"), "{e}");
        let e = parse("postgresql://h/%zz").unwrap_err();
        assert!(e.contains("percent-encoding in the database name"), "{e}");
    }

    #[test]
    fn quoting_round_trips() {
        let value = r"a 'b' \c";
        let pairs = parse(&format!("password={}", quote(value))).unwrap();
        assert_eq!(get(&pairs, "password"), Some(value));
    }
}
