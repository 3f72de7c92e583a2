//! The password file (`~/.pgpass`, `PGPASSFILE`, `passfile=`) as libpq reads it: lines
//! `host:port:database:user:password`, `*` matching anything in the first four fields, `\`
//! escaping `:` and `\`, lines starting with `#` ignored, the first matching line wins. A file
//! that group or others may read or write is ignored with a warning, as libpq does.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// What a connection is looked up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lookup<'a> {
    /// The host names tried in order (the host, then `localhost` for the default socket).
    pub(crate) hosts: Vec<&'a str>,
    pub(crate) port: &'a str,
    pub(crate) dbname: &'a str,
    pub(crate) user: &'a str,
}

/// The password for `lookup` in the file at `path`; `Ok(None)` when the file is missing or has
/// no matching line. `warn` receives libpq's warnings (a file with group or world access).
pub(crate) fn find(
    path: &Path,
    lookup: &Lookup<'_>,
    warn: &mut dyn FnMut(String),
) -> Option<String> {
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() {
        warn(format!(
            "password file {} is not a plain file; it is ignored",
            path.display()
        ));
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        warn(format!(
            "password file {} has group or world access; permissions should be u=rw (0600) or \
             less; it is ignored",
            path.display()
        ));
        return None;
    }
    let text = fs::read_to_string(path).ok()?;
    lookup
        .hosts
        .iter()
        .find_map(|host| find_in(&text, host, lookup))
}

/// The password of the first line of `text` matching `host` and the rest of `lookup`.
fn find_in(text: &str, host: &str, lookup: &Lookup<'_>) -> Option<String> {
    let wanted = [host, lookup.port, lookup.dbname, lookup.user];
    text.lines().find_map(|line| {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with('#') || line.is_empty() {
            return None;
        }
        let fields = split(line);
        if fields.len() < 5 {
            return None;
        }
        let matches = wanted
            .iter()
            .zip(&fields)
            .all(|(want, field)| field == "*" || field == want);
        matches.then(|| fields[4..].join(":"))
    })
}

/// The fields of a line, split at unescaped `:`, escapes removed.
fn split(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("one field").extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(host: &'a str, port: &'a str, db: &'a str, user: &'a str) -> Lookup<'a> {
        Lookup {
            hosts: vec![host],
            port,
            dbname: db,
            user,
        }
    }

    #[test]
    fn the_first_matching_line_wins_and_stars_match_anything() {
        let text = "# comment\n\
                    db1:5432:app:alice:first\n\
                    *:*:app:alice:second\n\
                    *:*:*:*:fallback\n";
        let l = lookup("db1", "5432", "app", "alice");
        assert_eq!(find_in(text, "db1", &l).as_deref(), Some("first"));
        let l = lookup("db2", "5432", "app", "alice");
        assert_eq!(find_in(text, "db2", &l).as_deref(), Some("second"));
        let l = lookup("db2", "5432", "other", "bob");
        assert_eq!(find_in(text, "db2", &l).as_deref(), Some("fallback"));
    }

    #[test]
    fn backslash_escapes_colons_and_backslashes() {
        let text = r"h\:x:5432:db:u:pa\:ss\\word";
        let l = lookup("h:x", "5432", "db", "u");
        assert_eq!(find_in(text, "h:x", &l).as_deref(), Some(r"pa:ss\word"));
    }

    #[test]
    fn an_unescaped_colon_in_the_password_is_kept() {
        let l = lookup("h", "1", "d", "u");
        assert_eq!(find_in("h:1:d:u:a:b", "h", &l).as_deref(), Some("a:b"));
    }

    #[test]
    fn a_group_readable_file_is_ignored_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        fs::write(&path, "*:*:*:*:secret\n").unwrap();
        let l = lookup("h", "5432", "d", "u");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let mut warnings = Vec::new();
        assert_eq!(find(&path, &l, &mut |w| warnings.push(w)), None);
        assert!(
            warnings[0].contains("group or world access"),
            "{warnings:?}"
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            find(&path, &l, &mut |w| warnings.push(w)).as_deref(),
            Some("secret")
        );
        assert_eq!(warnings.len(), 1);
    }
}
