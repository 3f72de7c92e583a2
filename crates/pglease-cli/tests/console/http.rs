//! A plain HTTP/1.1 client over `std::net::TcpStream`: what the tests need of the console's API,
//! with full control over the request's headers (a foreign `Host` or `Origin`, no CSRF token).
//! One request per connection (`Connection: close`); chunked answers are decoded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// An answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the whole answer otherwise.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("expected a JSON body ({e}), got {self:#?}"))
    }

    /// Panics with the whole answer unless the status is `status`.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Response {
        assert_eq!(
            self.status, status,
            "expected HTTP {status}, got the answer {self:#?}"
        );
        self
    }
}

/// A request being built: `request(addr, "GET", "/api/info").header(...).send()`.
pub struct Request {
    addr: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

/// A request to the server at `addr` (`127.0.0.1:PORT`); `Host` is `addr` unless set.
pub fn request(addr: &str, method: &str, path: &str) -> Request {
    Request {
        addr: addr.to_owned(),
        method: method.to_owned(),
        path: path.to_owned(),
        headers: Vec::new(),
        body: None,
    }
}

/// `GET path`.
pub fn get(addr: &str, path: &str) -> Response {
    request(addr, "GET", path).send()
}

impl Request {
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// A body as it is (set its Content-Type with [`Request::header`]).
    pub fn body(mut self, body: &str) -> Request {
        self.body = Some(body.to_owned());
        self
    }

    /// A JSON body (with its Content-Type).
    pub fn json(mut self, body: &serde_json::Value) -> Request {
        self.body = Some(body.to_string());
        self.header("Content-Type", "application/json")
    }

    pub fn send(self) -> Response {
        let mut stream = TcpStream::connect(&self.addr)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.addr));
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        if !self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("host"))
        {
            head.push_str(&format!("Host: {}\r\n", self.addr));
        }
        for (n, v) in &self.headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        let body = self.body.unwrap_or_default();
        head.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        ));
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let raw = read_answer(&mut stream)
            .unwrap_or_else(|e| panic!("{} {}: reading the answer: {e}", self.method, self.path));
        parse(&raw).unwrap_or_else(|| {
            panic!(
                "{} {}: not an HTTP answer: {:?}",
                self.method,
                self.path,
                String::from_utf8_lossy(&raw)
            )
        })
    }
}

/// The answer's bytes: up to the end of its body (Content-Length, the last chunk, or the end of
/// the connection), whether or not the server closes the connection after it.
fn read_answer(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let done = match length {
                Some(n) => raw.len() >= end + 4 + n,
                None if head.contains("transfer-encoding: chunked") => {
                    raw[end + 4..].windows(5).any(|w| w == b"0\r\n\r\n")
                }
                None => false,
            };
            if done {
                return Ok(raw);
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(raw);
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

fn parse(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&raw[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}
