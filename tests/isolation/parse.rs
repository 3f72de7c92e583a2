//! The isolation spec file format (`tests/isolation/specs/NAME.spec`) and its parser.
//!
//! A spec names sessions, their steps, and permutations of those steps, in the spirit of
//! PostgreSQL's isolation specs (`src/test/isolation/specs`):
//!
//! ```text
//! # A comment runs from `#` to the end of its line (outside SQL blocks).
//! setup    { SELECT lease.acquire('k', 'o0', '1 hour') }
//!
//! session s1
//! step s1_begin   { BEGIN }
//! step s1_release { SELECT status FROM lease.release('k', 'o0', 1) }
//! step s1_commit  { COMMIT }
//!
//! session s2
//! step s2_acquire_wait {
//!     SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute')
//! }
//!
//! session t timer
//! step t_await_lapse { DO $$ ... $$ }
//!
//! permutation waiting_acquire_is_granted_once_the_release_commits
//!     s1_begin s1_release s2_acquire_wait(s1_commit) s1_commit
//! ```
//!
//! - `database lease` (the default) or `database queue`, at most once: which shared database the
//!   spec runs in. `lease` is the database with pg_lease; `queue` the one with pg_lease_queue (and
//!   so pg_lease), where setup and teardown run as the installing role `lease_admin`, which alone
//!   may create and drop queues. Sessions are `app` in both.
//! - `setup { SQL }` runs as the role `app` (`lease_admin` in `database queue`) before each
//!   permutation, before its sessions connect; `teardown { SQL }` runs as that role after each
//!   permutation, once all its steps have completed. Neither shows in the output. Several of each
//!   run in the order written.
//! - `session NAME` starts a session (its own connection as `app`); the `step`s that follow, up to
//!   the next `session` or `permutation`, are its steps. `session NAME timer` marks a session whose
//!   steps only wait for the server clock: its `pg_sleep` is never reported as waiting.
//! - `step NAME { SQL }` defines a step; step names are unique in the spec, and every step belongs to
//!   exactly one session.
//! - `permutation NAME STEP...` runs the listed steps in order, on a key of its own; the list runs up
//!   to the next keyword or the end of the file. `STEP(WAKER)` says that step `STEP` blocks and is
//!   expected to complete once step `WAKER` has (needed when `STEP` sleeps between polls, see
//!   `spec.rs`). Permutation names are unique in the spec and name the property the transcript
//!   shows; they appear in the output and may contain `/` to tell variants apart.
//! - A SQL block runs from `{` to the first `}`, so its SQL cannot contain `}`. Its whitespace is
//!   collapsed to single spaces in the output. SQL names its key `'k'` and its queue `'q'`; each
//!   run of a permutation replaces `'k'` with a never-used key and `'q'` with a never-used queue
//!   name, also inside the literal lease keys of its partitions (`'lease_queue:q:0'`, and the
//!   prefix `'lease_queue:q:'`); the output shows the SQL as written.
//! - Names are letters, digits and `_` (and `/` in permutation names); keywords (`database`,
//!   `setup`, `teardown`, `session`, `timer`, `step`, `permutation`) are not names.
//!
//! The expected output, `tests/isolation/expected/NAME.out`, holds each permutation in the order
//! written: a line `permutation NAME: STEP...` and then its transcript (see `spec.rs`), with a
//! blank line between permutations.

use std::collections::HashSet;
use std::fmt;

use crate::spec::{Database, Permutation, SessionDef, Spec, StepRef};

/// Why a spec file could not be read: the file, the line, and what was wrong there.
#[derive(Debug)]
pub struct ParseError {
    file: String,
    line: usize,
    message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

const KEYWORDS: [&str; 7] = [
    "database",
    "setup",
    "teardown",
    "session",
    "timer",
    "step",
    "permutation",
];

/// A token and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Block(String),
}

impl Spec {
    /// Parses the text of spec file `file` (the name is used in errors only).
    ///
    /// # Errors
    ///
    /// A [`ParseError`] naming the line of the first problem: a token out of place, an unclosed
    /// `{`, a bad or duplicate name, an empty session, no session or permutation, or a permutation
    /// naming an unknown step.
    pub fn parse(file: &str, text: &str) -> Result<Spec, ParseError> {
        let error = |line: usize, message: String| ParseError {
            file: file.to_owned(),
            line,
            message,
        };
        let tokens = tokenize(text).map_err(|(line, m)| error(line, m))?;
        let mut spec = Spec::default();
        // Where each session and permutation was declared, for later errors.
        let mut session_lines = Vec::new();
        let mut permutation_lines = Vec::new();
        let mut step_names = HashSet::new();
        let mut database_line = None;
        let mut i = 0;
        while i < tokens.len() {
            let (line, token) = &tokens[i];
            let line = *line;
            i += 1;
            let keyword = match token {
                Token::Word(w) => w.as_str(),
                Token::Block(_) => {
                    return Err(error(
                        line,
                        "a SQL block must follow `setup`, `teardown` or `step NAME`".into(),
                    ));
                }
            };
            match keyword {
                "database" => {
                    let which =
                        name(&tokens, &mut i, "database", false).map_err(|m| error(line, m))?;
                    if let Some(first) = database_line.replace(line) {
                        return Err(error(
                            line,
                            format!("`database` is given twice (first on line {first})"),
                        ));
                    }
                    spec.database = match which.as_str() {
                        "lease" => Database::Lease,
                        "queue" => Database::Queue,
                        other => {
                            return Err(error(
                                line,
                                format!("unknown database {other:?} (`lease` or `queue`)"),
                            ));
                        }
                    };
                }
                "setup" | "teardown" => {
                    let sql = block(&tokens, &mut i, line, keyword).map_err(|m| error(line, m))?;
                    if keyword == "setup" {
                        spec.setup.push(sql);
                    } else {
                        spec.teardown.push(sql);
                    }
                }
                "session" => {
                    let name =
                        name(&tokens, &mut i, "session", false).map_err(|m| error(line, m))?;
                    if spec.sessions.iter().any(|s| s.name == name) {
                        return Err(error(line, format!("session {name} is defined twice")));
                    }
                    let timer = matches!(tokens.get(i), Some((_, Token::Word(w))) if w == "timer");
                    if timer {
                        i += 1;
                    }
                    spec.sessions.push(SessionDef {
                        name,
                        sleep_is_waiting: !timer,
                        steps: Vec::new(),
                    });
                    session_lines.push(line);
                }
                "step" => {
                    let name = name(&tokens, &mut i, "step", false).map_err(|m| error(line, m))?;
                    let sql = block(&tokens, &mut i, line, &format!("step {name}"))
                        .map_err(|m| error(line, m))?;
                    if !step_names.insert(name.clone()) {
                        return Err(error(line, format!("step {name} is defined twice")));
                    }
                    let Some(session) = spec.sessions.last_mut() else {
                        return Err(error(
                            line,
                            format!("step {name} comes before any `session`"),
                        ));
                    };
                    if !spec.permutations.is_empty() {
                        return Err(error(
                            line,
                            format!("step {name} comes after a permutation: define steps first"),
                        ));
                    }
                    session.steps.push((name, sql));
                }
                "permutation" => {
                    let name =
                        name(&tokens, &mut i, "permutation", true).map_err(|m| error(line, m))?;
                    if spec.permutations.iter().any(|p| p.name == name) {
                        return Err(error(line, format!("permutation {name} is defined twice")));
                    }
                    let mut steps = Vec::new();
                    while let Some((step_line, Token::Word(w))) = tokens.get(i) {
                        if KEYWORDS.contains(&w.as_str()) {
                            break;
                        }
                        steps.push(step_ref(w).map_err(|m| error(*step_line, m))?);
                        i += 1;
                    }
                    if steps.is_empty() {
                        return Err(error(line, format!("permutation {name} lists no steps")));
                    }
                    spec.permutations.push(Permutation { name, steps });
                    permutation_lines.push(line);
                }
                other => {
                    return Err(error(
                        line,
                        format!(
                            "expected `database`, `setup`, `teardown`, `session`, `step` or \
                             `permutation`, found {other:?}"
                        ),
                    ));
                }
            }
        }

        for (session, line) in spec.sessions.iter().zip(&session_lines) {
            if session.steps.is_empty() {
                return Err(error(
                    *line,
                    format!("session {} has no steps", session.name),
                ));
            }
        }
        if spec.sessions.is_empty() {
            return Err(error(1, "the spec defines no session".into()));
        }
        if spec.permutations.is_empty() {
            return Err(error(1, "the spec defines no permutation".into()));
        }
        for (p, line) in spec.permutations.iter().zip(&permutation_lines) {
            for s in &p.steps {
                for name in std::iter::once(&s.name).chain(&s.woken_by) {
                    if !step_names.contains(name) {
                        return Err(error(
                            *line,
                            format!("permutation {} names an unknown step {name}", p.name),
                        ));
                    }
                }
            }
        }
        Ok(spec)
    }
}

/// Splits `text` into words and `{ ... }` blocks (with their lines), dropping comments.
fn tokenize(text: &str) -> Result<Vec<(usize, Token)>, (usize, String)> {
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            '\n' => {
                line += 1;
                chars.next();
            }
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => while chars.next_if(|&c| c != '\n').is_some() {},
            '{' => {
                let start = line;
                chars.next();
                let mut sql = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => {
                            line += usize::from(c == '\n');
                            sql.push(c);
                        }
                        None => return Err((start, "`{` is never closed by `}`".into())),
                    }
                }
                let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
                if sql.is_empty() {
                    return Err((start, "empty SQL block".into()));
                }
                tokens.push((start, Token::Block(sql)));
            }
            '}' => return Err((line, "`}` without a `{`".into())),
            _ => {
                let mut word = String::new();
                while let Some(c) = chars.next_if(|&c| !c.is_whitespace() && !"{}#".contains(c)) {
                    word.push(c);
                }
                tokens.push((line, Token::Word(word)));
            }
        }
    }
    Ok(tokens)
}

/// The SQL block at `tokens[*i]`, which `what` (declared on `line`) requires.
fn block(
    tokens: &[(usize, Token)],
    i: &mut usize,
    line: usize,
    what: &str,
) -> Result<String, String> {
    match tokens.get(*i) {
        Some((_, Token::Block(sql))) => {
            *i += 1;
            Ok(sql.clone())
        }
        _ => Err(format!(
            "`{what}` on line {line} must be followed by a `{{ SQL }}` block"
        )),
    }
}

/// The name at `tokens[*i]` for a `what` (slashes allowed if `slashes`).
fn name(
    tokens: &[(usize, Token)],
    i: &mut usize,
    what: &str,
    slashes: bool,
) -> Result<String, String> {
    let Some((_, Token::Word(w))) = tokens.get(*i) else {
        return Err(format!("`{what}` must be followed by a name"));
    };
    check_name(w, what, slashes)?;
    *i += 1;
    Ok(w.clone())
}

fn check_name(w: &str, what: &str, slashes: bool) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || (slashes && c == '/');
    if w.is_empty() || !w.chars().all(allowed) {
        let also = if slashes { ", `_` and `/`" } else { " and `_`" };
        return Err(format!(
            "{w:?} is not a valid {what} name (letters, digits{also})"
        ));
    }
    if KEYWORDS.contains(&w) {
        return Err(format!("{w:?} is a keyword, not a {what} name"));
    }
    Ok(())
}

/// A permutation entry: `STEP` or `STEP(WAKER)`.
fn step_ref(word: &str) -> Result<StepRef, String> {
    let (name, woken_by) = match word.split_once('(') {
        None => (word, None),
        Some((name, rest)) => match rest.strip_suffix(')') {
            Some(waker) => (name, Some(waker)),
            None => return Err(format!("{word:?}: expected `STEP(WAKER)`")),
        },
    };
    check_name(name, "step", false).map_err(|m| format!("in {word:?}: {m}"))?;
    if let Some(waker) = woken_by {
        check_name(waker, "step", false).map_err(|m| format!("in {word:?}: {m}"))?;
    }
    Ok(StepRef {
        name: name.to_owned(),
        woken_by: woken_by.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match Spec::parse("t.spec", text) {
            Ok(_) => panic!("parsed: {text}"),
            Err(e) => e.to_string(),
        }
    }

    const GOOD: &str = "
        # a comment { with braces }
        setup { SELECT 1 }
        teardown { SELECT 2 }
        session s1
        step s1_a { SELECT
                    1 AS a }   # trailing comment
        session t timer
        step t_b { SELECT 2 }
        permutation one/variant
            s1_a
            t_b(s1_a)
        permutation two s1_a
    ";

    #[test]
    fn a_spec_parses_into_sessions_steps_and_permutations() {
        let spec = Spec::parse("t.spec", GOOD).unwrap();
        assert_eq!(spec.setup, ["SELECT 1"]);
        assert_eq!(spec.teardown, ["SELECT 2"]);
        assert_eq!(spec.sessions.len(), 2);
        assert_eq!(spec.sessions[0].name, "s1");
        assert!(spec.sessions[0].sleep_is_waiting);
        assert_eq!(
            spec.sessions[0].steps,
            [("s1_a".to_owned(), "SELECT 1 AS a".to_owned())]
        );
        assert!(!spec.sessions[1].sleep_is_waiting, "a timer session");
        assert_eq!(spec.database, Database::Lease, "the default database");
        let names: Vec<&str> = spec.permutations.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["one/variant", "two"]);
        let one = &spec.permutations[0].steps;
        assert_eq!(
            (one[0].name.as_str(), one[0].woken_by.as_deref()),
            ("s1_a", None)
        );
        assert_eq!(
            (one[1].name.as_str(), one[1].woken_by.as_deref()),
            ("t_b", Some("s1_a"))
        );
    }

    #[test]
    fn database_queue_selects_the_queue_database() {
        let spec = Spec::parse(
            "t.spec",
            "database queue\nsession s1\nstep s1_a { SELECT 1 }\npermutation p s1_a",
        )
        .unwrap();
        assert_eq!(spec.database, Database::Queue);
        assert_eq!(
            err(
                "database queue\ndatabase lease\nsession s1\nstep s1_a { SELECT 1 }\npermutation p s1_a"
            ),
            "t.spec:2: `database` is given twice (first on line 1)"
        );
        assert_eq!(
            err("database regress\nsession s1\nstep s1_a { SELECT 1 }\npermutation p s1_a"),
            "t.spec:1: unknown database \"regress\" (`lease` or `queue`)"
        );
    }

    #[test]
    fn parse_errors_name_the_file_the_line_and_the_problem() {
        assert_eq!(
            err("session s1\nstep s1_a {\nSELECT 1\n"),
            "t.spec:2: `{` is never closed by `}`"
        );
        assert_eq!(
            err("session s1\nstep s1_a { SELECT 1 }\npermutation p s1_a s1_b"),
            "t.spec:3: permutation p names an unknown step s1_b"
        );
        assert_eq!(
            err("session s1\nstep s1_a { SELECT 1 }\npermutation p s1_a(s9)"),
            "t.spec:3: permutation p names an unknown step s9"
        );
        assert_eq!(
            err("step s1_a { SELECT 1 }"),
            "t.spec:1: step s1_a comes before any `session`"
        );
        assert_eq!(
            err("session s1\nstep s1_a { SELECT 1 }\nstep s1_a { SELECT 2 }\npermutation p s1_a"),
            "t.spec:3: step s1_a is defined twice"
        );
        assert_eq!(
            err("session s1\nstep s1_a SELECT 1\npermutation p s1_a"),
            "t.spec:2: `step s1_a` on line 2 must be followed by a `{ SQL }` block"
        );
        assert_eq!(
            err("session s1\nsession s2\nstep s2_a { SELECT 1 }\npermutation p s2_a"),
            "t.spec:1: session s1 has no steps"
        );
        assert_eq!(
            err("session s1\nstep s1_a { SELECT 1 }"),
            "t.spec:1: the spec defines no permutation"
        );
        assert_eq!(
            err("session s1\nstep s1_a { SELECT 1 }\npermutation p s1_a(s1_a"),
            "t.spec:3: \"s1_a(s1_a\": expected `STEP(WAKER)`"
        );
        assert_eq!(
            err("session step\n"),
            "t.spec:1: \"step\" is a keyword, not a session name"
        );
        assert_eq!(
            err("sesion s1"),
            "t.spec:1: expected `database`, `setup`, `teardown`, `session`, `step` or \
             `permutation`, found \"sesion\""
        );
        assert_eq!(
            err("session s1\nstep s1_a { SELECT 1 }\npermutation p\npermutation q s1_a"),
            "t.spec:3: permutation p lists no steps"
        );
    }
}
