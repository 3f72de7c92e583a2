//! The live progress line on stderr during long waits: drawn only when stderr is a terminal,
//! redrawn in place (`\r` + erase line), never wider than the terminal (its width is read at every
//! redraw, so a resized terminal is followed), and erased when done so the terminal shows no trace
//! of it.

use std::io::{self, IsTerminal, Write};

/// A single redrawable line on stderr; inert when stderr is not a terminal.
#[derive(Debug)]
pub struct ProgressLine {
    enabled: bool,
    drawn: bool,
}

impl ProgressLine {
    /// A progress line, enabled only if stderr is a terminal.
    pub fn new() -> ProgressLine {
        ProgressLine {
            enabled: io::stderr().is_terminal(),
            drawn: false,
        }
    }

    /// Whether anything will be drawn.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The columns a line may take: the terminal's width (80 if unknown) less one, so the cursor
    /// never wraps.
    pub fn width(&self) -> usize {
        terminal_width().unwrap_or(80).saturating_sub(1).max(10)
    }

    /// Replaces the line's text (cut with `…` if it is wider than [`width`](Self::width); callers
    /// fit their text first, see `waiting::progress_text`).
    pub fn set(&mut self, text: &str) {
        if !self.enabled {
            return;
        }
        let width = self.width();
        let text: String = if text.chars().count() > width {
            let mut cut: String = text.chars().take(width - 1).collect();
            cut.push('\u{2026}');
            cut
        } else {
            text.to_owned()
        };
        let mut err = io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Erases the line.
    pub fn clear(&mut self) {
        if self.drawn {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The width of the terminal on stderr, if it is one.
fn terminal_width() -> Option<usize> {
    // SAFETY: winsize is plain old data; TIOCGWINSZ fills it in for a terminal descriptor.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: fd 2 and a valid pointer to a winsize.
    let rc = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
