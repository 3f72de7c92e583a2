//! Minimal HTTP/1.0 requests to 127.0.0.1, for Patroni's REST API and etcd's health endpoint and
//! JSON gateway (all plain HTTP on loopback here): enough to send a small JSON body and read a
//! status code and a short answer.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// How long one request may take (connect, write, read): the servers are local.
const TIMEOUT: Duration = Duration::from_secs(2);

/// `GET path` from `127.0.0.1:port`: the status code and the body, or `None` if nothing answered
/// in time (refused, reset, timed out, or not HTTP).
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "GET", path, "")
}

/// `POST path` with a JSON `body` to `127.0.0.1:port`, as [`get`].
pub fn post(port: u16, path: &str, body: &str) -> Option<(u16, String)> {
    request(port, "POST", path, body)
}

fn request(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).ok()?;
    stream.set_read_timeout(Some(TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(TIMEOUT)).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .strip_prefix("HTTP/1.")?
        .get(2..)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// The status code of `GET path`, if anything answered.
pub fn status(port: u16, path: &str) -> Option<u16> {
    get(port, path).map(|(code, _)| code)
}
