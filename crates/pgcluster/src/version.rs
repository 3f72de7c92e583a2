//! PostgreSQL version numbers and parsing of `postgres --version` output.

use std::fmt;

/// A PostgreSQL version as `major.minor` (pre-releases such as `17beta1` have minor 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgVersion {
    /// The major version, e.g. 15.
    pub major: u32,
    /// The minor version, e.g. 19 for 15.19.
    pub minor: u32,
}

impl PgVersion {
    /// Parses a version token such as `15.19`, `18.1`, `17beta1` or `16devel`.
    pub fn parse(token: &str) -> Option<PgVersion> {
        let token = token.trim();
        let major_len = token.bytes().take_while(u8::is_ascii_digit).count();
        if major_len == 0 {
            return None;
        }
        let major: u32 = token[..major_len].parse().ok()?;
        let rest = &token[major_len..];
        let minor = match rest.strip_prefix('.') {
            Some(after) => {
                let n = after.bytes().take_while(u8::is_ascii_digit).count();
                if n == 0 { 0 } else { after[..n].parse().ok()? }
            }
            None => 0,
        };
        Some(PgVersion { major, minor })
    }

    /// Parses the output of `postgres --version`, e.g.
    /// `postgres (PostgreSQL) 15.19` or `postgres (PostgreSQL) 18.1 (Debian 18.1-1.pgdg120+2)`.
    pub fn from_version_output(output: &str) -> Option<PgVersion> {
        let line = output.lines().next()?.trim();
        let after = match line.find("(PostgreSQL)") {
            Some(i) => &line[i + "(PostgreSQL)".len()..],
            None => line,
        };
        after.split_whitespace().find_map(PgVersion::parse)
    }
}

impl fmt::Display for PgVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::PgVersion;

    fn v(major: u32, minor: u32) -> Option<PgVersion> {
        Some(PgVersion { major, minor })
    }

    #[test]
    fn parses_version_outputs() {
        assert_eq!(
            PgVersion::from_version_output("postgres (PostgreSQL) 15.19\n"),
            v(15, 19)
        );
        assert_eq!(
            PgVersion::from_version_output("postgres (PostgreSQL) 18.1 (Debian 18.1-1.pgdg120+2)"),
            v(18, 1)
        );
        assert_eq!(
            PgVersion::from_version_output("postgres (PostgreSQL) 17beta1"),
            v(17, 0)
        );
        assert_eq!(
            PgVersion::from_version_output("postgres (PostgreSQL) 16devel"),
            v(16, 0)
        );
        assert_eq!(
            PgVersion::from_version_output("18.1 (Debian 18.1-1)"),
            v(18, 1)
        );
        assert_eq!(PgVersion::from_version_output("garbage"), None);
        assert_eq!(PgVersion::from_version_output(""), None);
    }

    #[test]
    fn displays_major_minor() {
        assert_eq!(
            PgVersion {
                major: 15,
                minor: 19
            }
            .to_string(),
            "15.19"
        );
    }
}
