//! A readable line diff of an expected output and the output a spec produced, for failure messages.

use std::fmt::Write as _;

/// Lines of unchanged context shown around each change.
const CONTEXT: usize = 3;

/// The lines that differ between `expected` and `got`, marked `-` (expected only) and `+` (got
/// only), each change with a few unchanged lines around it (` `), and `@@ line N: PERMUTATION @@`
/// where unchanged lines were left out (N: the line of `expected`; PERMUTATION: the permutation that
/// line belongs to). Empty if the lines are the same.
pub fn diff(expected: &str, got: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0_usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // (mark, line of `expected` it is at, text)
    let mut ops: Vec<(char, usize, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', i + 1, a[i]));
            i += 1;
            j += 1;
        } else if j == b.len() || (i < a.len() && lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i + 1, a[i]));
            i += 1;
        } else {
            ops.push(('+', i + 1, b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut out = String::new();
    let mut shown_to = 0; // ops[..shown_to] are printed or skipped
    for &k in &changed {
        let from = k.saturating_sub(CONTEXT).max(shown_to);
        if from > shown_to {
            let line = ops[from].1;
            let permutation = a[..line.min(a.len())]
                .iter()
                .rev()
                .find_map(|l| l.strip_prefix("permutation "))
                .and_then(|l| l.split(':').next())
                .unwrap_or("(before the first permutation)");
            writeln!(out, "@@ line {line}: {permutation} @@").unwrap();
        }
        let to = (k + CONTEXT + 1).min(ops.len());
        for (mark, _, text) in &ops[from..to] {
            writeln!(out, "{mark} {text}").unwrap();
        }
        shown_to = shown_to.max(to);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::diff;

    #[test]
    fn diff_marks_changed_lines_with_context() {
        let expected = "permutation p: s1\nb\nc\nd\ne\nf\ng\nh\ni\n";
        let got = "permutation p: s1\nb\nc\nd\nE\nf\ng\nh\ni\nj\n";
        assert_eq!(
            diff(expected, got),
            "@@ line 2: p @@\n  b\n  c\n  d\n- e\n+ E\n  f\n  g\n  h\n  i\n+ j\n"
        );
        assert_eq!(diff(expected, expected), "");
    }
}
