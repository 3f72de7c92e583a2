//! A minimal HTTP/1.1 client for the console section: `GET` on a keep-alive connection (bodies
//! framed by `Content-Length` or chunked), and the first event of a Server-Sent Events stream on
//! a connection of its own. Just what measuring the console needs: no TLS, no redirects, no
//! compression.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::{BoxResult, err};

/// The most a head or a body may be (a console answer is far smaller).
const MAX_BYTES: usize = 64 * 1024 * 1024;

/// What one request got back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body's start, for an error message.
    pub fn excerpt(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.chars().take(300).collect()
    }
}

/// One client: a connection kept open between requests (opened again if the server closed it).
pub struct Client {
    addr: SocketAddr,
    host: String,
    conn: Option<BufReader<TcpStream>>,
    /// Bound of one whole exchange.
    timeout: Duration,
}

struct Head {
    status: u16,
    content_length: Option<usize>,
    chunked: bool,
    close: bool,
}

impl Client {
    pub fn new(addr: SocketAddr, timeout: Duration) -> Client {
        Client {
            addr,
            host: addr.to_string(),
            conn: None,
            timeout,
        }
    }

    async fn connect(&self) -> BoxResult<BufReader<TcpStream>> {
        let s = TcpStream::connect(self.addr).await?;
        s.set_nodelay(true)?;
        Ok(BufReader::with_capacity(64 * 1024, s))
    }

    /// `GET path` on the kept connection; the whole body is read.
    pub async fn get(&mut self, path: &str) -> BoxResult<Answer> {
        match tokio::time::timeout(self.timeout, self.get_inner(path)).await {
            Ok(r) => r,
            Err(_) => {
                self.conn = None;
                Err(err(format!(
                    "GET {path}: no complete answer within {:?}",
                    self.timeout
                )))
            }
        }
    }

    async fn get_inner(&mut self, path: &str) -> BoxResult<Answer> {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: */*\r\nUser-Agent: pglease-bench\r\n\r\n",
            self.host
        );
        // A kept connection the server has closed in the meantime fails at once (EOF before a
        // status line): then once more on a new one.
        for attempt in 0..2 {
            let reused = self.conn.is_some();
            let mut conn = match self.conn.take() {
                Some(c) => c,
                None => self.connect().await?,
            };
            if let Err(e) = conn.get_mut().write_all(request.as_bytes()).await {
                if reused && attempt == 0 {
                    continue;
                }
                return Err(e.into());
            }
            let head = match read_head(&mut conn).await {
                Ok(Some(h)) => h,
                Ok(None) if reused && attempt == 0 => continue,
                Ok(None) => return Err(err(format!("GET {path}: connection closed"))),
                Err(e) => return Err(e),
            };
            let body = read_body(&mut conn, &head).await?;
            if !head.close && (head.content_length.is_some() || head.chunked) {
                self.conn = Some(conn);
            }
            return Ok(Answer {
                status: head.status,
                body,
            });
        }
        Err(err(format!("GET {path}: connection closed twice")))
    }

    /// Opens `path` (an event stream) on a new connection and reads until its first event;
    /// returns the status and the event's name (`view`, `notice`), then closes the stream.
    pub async fn first_event(&self, path: &str) -> BoxResult<(u16, String)> {
        match tokio::time::timeout(self.timeout, self.first_event_inner(path)).await {
            Ok(r) => r,
            Err(_) => Err(err(format!(
                "GET {path}: no event within {:?}",
                self.timeout
            ))),
        }
    }

    async fn first_event_inner(&self, path: &str) -> BoxResult<(u16, String)> {
        let mut conn = self.connect().await?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nUser-Agent: pglease-bench\r\n\r\n",
            self.host
        );
        conn.get_mut().write_all(request.as_bytes()).await?;
        let head = read_head(&mut conn)
            .await?
            .ok_or_else(|| err(format!("GET {path}: connection closed")))?;
        if head.status != 200 {
            let body = read_body(&mut conn, &head).await.unwrap_or_default();
            return Err(err(format!(
                "GET {path}: HTTP {}: {}",
                head.status,
                String::from_utf8_lossy(&body)
            )));
        }
        let mut text = String::new();
        loop {
            if let Some(name) = complete_event(&text) {
                return Ok((head.status, name));
            }
            let piece = if head.chunked {
                match read_chunk(&mut conn).await? {
                    Some(c) => c,
                    None => break,
                }
            } else {
                let mut buf = vec![0u8; 16 * 1024];
                let n = conn.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                buf.truncate(n);
                buf
            };
            text.push_str(&String::from_utf8_lossy(&piece));
            if text.len() > MAX_BYTES {
                return Err(err(format!("GET {path}: first event too large")));
            }
        }
        Err(err(format!("GET {path}: stream ended before an event")))
    }
}

/// The name of the first complete event in `text` (a block ended by a blank line with an
/// `event:` line; comment-only blocks such as keep-alives are skipped).
fn complete_event(text: &str) -> Option<String> {
    let normal = text.replace("\r\n", "\n");
    let mut rest = normal.as_str();
    while let Some(end) = rest.find("\n\n") {
        let block = &rest[..end];
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("event:").map(|n| n.trim().to_owned()));
        let has_data = block.lines().any(|l| l.starts_with("data:"));
        match name {
            Some(n) => return Some(n),
            None if has_data => return Some("message".into()),
            None => rest = &rest[end + 2..],
        }
    }
    None
}

async fn read_line(conn: &mut BufReader<TcpStream>) -> BoxResult<Option<String>> {
    let mut line = String::new();
    let n = conn.read_line(&mut line).await?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
}

/// The status line and the headers that frame the body; `None` on EOF before any byte.
async fn read_head(conn: &mut BufReader<TcpStream>) -> BoxResult<Option<Head>> {
    let Some(status_line) = read_line(conn).await? else {
        return Ok(None);
    };
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(err(format!("not an HTTP/1 answer: {status_line:?}")));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| err(format!("no status in {status_line:?}")))?;
    let mut head = Head {
        status,
        content_length: None,
        chunked: false,
        close: version == "HTTP/1.0",
    };
    let mut total = 0;
    loop {
        let line = read_line(conn)
            .await?
            .ok_or_else(|| err("connection closed inside the headers"))?;
        if line.is_empty() {
            break;
        }
        total += line.len();
        if total > MAX_BYTES {
            return Err(err("headers too large"));
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => head.content_length = value.parse().ok(),
            "transfer-encoding" => head.chunked = value.to_ascii_lowercase().contains("chunked"),
            "connection" => head.close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    Ok(Some(head))
}

/// One chunk of a chunked body; `None` after the last (zero-sized) chunk and its trailers.
async fn read_chunk(conn: &mut BufReader<TcpStream>) -> BoxResult<Option<Vec<u8>>> {
    let line = read_line(conn)
        .await?
        .ok_or_else(|| err("connection closed inside a chunked body"))?;
    let size_text = line.split(';').next().unwrap_or("").trim();
    let size = usize::from_str_radix(size_text, 16)
        .map_err(|_| err(format!("bad chunk size {line:?}")))?;
    if size == 0 {
        while let Some(l) = read_line(conn).await? {
            if l.is_empty() {
                break;
            }
        }
        return Ok(None);
    }
    if size > MAX_BYTES {
        return Err(err("chunk too large"));
    }
    let mut buf = vec![0u8; size];
    conn.read_exact(&mut buf).await?;
    let mut crlf = [0u8; 2];
    conn.read_exact(&mut crlf).await?;
    Ok(Some(buf))
}

async fn read_body(conn: &mut BufReader<TcpStream>, head: &Head) -> BoxResult<Vec<u8>> {
    if head.status == 204 || head.status == 304 || (100..200).contains(&head.status) {
        return Ok(Vec::new());
    }
    if head.chunked {
        let mut body = Vec::new();
        while let Some(c) = read_chunk(conn).await? {
            body.extend_from_slice(&c);
            if body.len() > MAX_BYTES {
                return Err(err("body too large"));
            }
        }
        return Ok(body);
    }
    if let Some(n) = head.content_length {
        if n > MAX_BYTES {
            return Err(err("body too large"));
        }
        let mut body = vec![0u8; n];
        conn.read_exact(&mut body).await?;
        return Ok(body);
    }
    // Neither: the body runs until the server closes the connection.
    let mut body = Vec::new();
    AsyncReadExt::take(&mut *conn, MAX_BYTES as u64)
        .read_to_end(&mut body)
        .await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_complete_event_skips_comments() {
        assert_eq!(complete_event(": keep-alive\n\n"), None);
        assert_eq!(
            complete_event(": hi\n\nevent: view\ndata: {}\n\n").as_deref(),
            Some("view")
        );
        assert_eq!(complete_event("event: notice\ndata: {\"m\":1}\n"), None);
        assert_eq!(
            complete_event("event: notice\r\ndata: x\r\n\r\n").as_deref(),
            Some("notice")
        );
    }
}
