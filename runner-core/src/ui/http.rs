//! The live page's HTTP server: one request per connection, each connection on a thread of its
//! own with a read and a write timeout.
//!
//! A small general server (tiny_http's, for one) writes each answer on the thread that took the
//! request and waits as long as the client does: a client that asks and never reads would hold
//! it, and every answer queued behind it, forever. Here each connection gets one answer
//! (`Connection: close`) on its own thread, which gives up on a client that has not sent its
//! request or taken its answer within [`TIMEOUT`]; at most [`CONNECTIONS`] are served at once,
//! and connections beyond that are closed unanswered. The query never touches any of it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::{Error, Result};

/// Connections served at once; more are closed unanswered.
pub const CONNECTIONS: usize = 32;
/// How long a client may take to send its request, or to take in a chunk of its answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read.
const MAX_HEAD: usize = 16 * 1024;

/// An answer: status, content type and body.
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// What answers a request for a path (with its query string).
pub type Handler = Arc<dyn Fn(&str) -> Answer + Send + Sync>;

/// A running server: stops accepting when dropped.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl HttpServer {
    /// Listens on `host:port` (port 0: any free port) and answers with `handler`.
    pub fn start(host: &str, port: u16, handler: Handler) -> Result<HttpServer> {
        let cannot = |e: &dyn std::fmt::Display| {
            Error::Options(format!("--ui-port {port}: cannot serve the live page on {host}:{port}: {e}"))
        };
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| cannot(&e))?
            .next()
            .ok_or_else(|| Error::Options(format!("--ui-host {host}: no address to listen on")))?;
        let listener = TcpListener::bind(addr).map_err(|e| cannot(&e))?;
        let addr = listener.local_addr().map_err(|e| cannot(&e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::Builder::new()
            .name("weir-ui".into())
            .spawn(move || accept(&listener, &handler, &s))
            .map_err(|e| cannot(&e))?;
        Ok(HttpServer { addr, stop })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the flag.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(if wake.is_ipv4() { [127, 0, 0, 1].into() } else { std::net::Ipv6Addr::LOCALHOST.into() });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
    }
}

fn accept(listener: &TcpListener, handler: &Handler, stop: &AtomicBool) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        if open.load(Ordering::Relaxed) >= CONNECTIONS
            || stream.set_read_timeout(Some(TIMEOUT)).is_err()
            || stream.set_write_timeout(Some(TIMEOUT)).is_err()
        {
            continue;
        }
        let slot = Slot::take(&open);
        let handler = handler.clone();
        // Without a thread (the system is out of them) the connection is closed unanswered.
        let _ = std::thread::Builder::new().name("weir-ui-client".into()).spawn(move || {
            let _slot = slot;
            // A client that went away or stalled is its own loss.
            let _ = serve(&mut stream, &handler);
        });
    }
}

/// One of the [`CONNECTIONS`] served at once, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>) -> Slot {
        open.fetch_add(1, Ordering::Relaxed);
        Slot(open.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads one request head and writes its answer.
fn serve(stream: &mut TcpStream, handler: &Handler) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let (method, path) = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {
                break (request.method.unwrap_or("").to_string(), request.path.unwrap_or("/").to_string())
            }
            Ok(httparse::Status::Partial) if head.len() < MAX_HEAD => continue,
            Ok(httparse::Status::Partial) => return write(stream, "GET", &plain(431, "request head too large")),
            Err(e) => return write(stream, "GET", &plain(400, &format!("bad request: {e}"))),
        }
    };
    let answer = match method.as_str() {
        "GET" | "HEAD" => handler(&path),
        _ => plain(405, &format!("{method} is not served here; use GET")),
    };
    write(stream, &method, &answer)
}

fn plain(status: u16, text: &str) -> Answer {
    Answer { status, content_type: "text/plain; charset=utf-8", body: text.to_string() }
}

fn write(stream: &mut TcpStream, method: &str, answer: &Answer) -> std::io::Result<()> {
    let reason = match answer.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "",
    };
    let csp = "default-src 'none'; connect-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'";
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nContent-Security-Policy: {csp}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    stream.write_all(head.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(answer.body.as_bytes())?;
    }
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Write)
}
