//! A plain HTTP/1.1 server for data transfers to fetch from: a real socket and real HTTP (what
//! reqwest on the agent talks to), serving fixed routes. Small enough to own here rather than
//! start python's `http.server`, and it can require a bearer token, answer slowly, lie about a
//! body's length, or hold a request until the test lets it go.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone)]
pub enum Route {
    /// 200 with this body.
    Body(Vec<u8>),
    /// 200 with this body, only with `Authorization: Bearer TOKEN`; 401 otherwise.
    Bearer(String, Vec<u8>),
    /// Headers, then nothing for this long (a stalled server).
    Stall(Duration),
    /// Announces `Content-Length: n` and sends fewer bytes, then closes.
    Short(u64, Vec<u8>),
    /// Tells the test it was asked (on [`Server::held`]), waits for [`Server::release`],
    /// then 200 with this body.
    Hold(Vec<u8>),
    /// 200 announcing this whole body, of which the first half trickles out (1000 bytes
    /// every 50 ms), then as `Hold` (told on [`Server::held`], waits for [`Server::release`])
    /// the rest: a transfer that is seen while it moves.
    Trickle(Vec<u8>),
}

/// Requests seen: (path, authorization header).
pub type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

pub struct Server {
    pub port: u16,
    held: Mutex<mpsc::Receiver<()>>,
    release: mpsc::Sender<()>,
    pub seen: Seen,
}

impl Server {
    pub fn start(routes: Vec<(&str, Route)>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let routes: Arc<HashMap<String, Route>> = Arc::new(
            routes
                .into_iter()
                .map(|(p, r)| (p.to_string(), r))
                .collect(),
        );
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let seen: Seen = Arc::new(Mutex::new(vec![]));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (routes, held_tx, release_rx, seen) = (
                    routes.clone(),
                    held_tx.clone(),
                    release_rx.clone(),
                    seen2.clone(),
                );
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut first = String::new();
                    if reader.read_line(&mut first).is_err() {
                        return;
                    }
                    let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let mut auth = None;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':') {
                            if k.eq_ignore_ascii_case("authorization") {
                                auth = Some(v.trim().to_string());
                            }
                        }
                    }
                    seen.lock().unwrap().push((path.clone(), auth.clone()));
                    let reply = |conn: &mut std::net::TcpStream, status: &str, body: &[u8]| {
                        let _ = write!(
                            conn,
                            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = conn.write_all(body);
                    };
                    match routes.get(&path) {
                        None => reply(&mut conn, "404 Not Found", b"not found"),
                        Some(Route::Body(b)) => reply(&mut conn, "200 OK", b),
                        Some(Route::Bearer(token, b)) => {
                            if auth.as_deref() == Some(&format!("Bearer {token}")) {
                                reply(&mut conn, "200 OK", b)
                            } else {
                                reply(&mut conn, "401 Unauthorized", b"no")
                            }
                        }
                        Some(Route::Stall(d)) => {
                            let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
                            std::thread::sleep(*d);
                        }
                        Some(Route::Short(n, b)) => {
                            let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
                            let _ = conn.write_all(b);
                        }
                        Some(Route::Trickle(b)) => {
                            let _ = write!(
                                conn,
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                                b.len()
                            );
                            let (first, rest) = b.split_at(b.len() / 2);
                            for chunk in first.chunks(1000) {
                                if conn.write_all(chunk).and_then(|_| conn.flush()).is_err() {
                                    return;
                                }
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            let _ = held_tx.send(());
                            let _ = release_rx.lock().unwrap().recv();
                            let _ = conn.write_all(rest);
                        }
                        Some(Route::Hold(b)) => {
                            let _ = held_tx.send(());
                            let _ = release_rx.lock().unwrap().recv();
                            reply(&mut conn, "200 OK", b)
                        }
                    }
                });
            }
        });
        Server {
            port,
            held: Mutex::new(held_rx),
            release: release_tx,
            seen,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits (up to two minutes) until a [`Route::Hold`] request arrives.
    pub fn held(&self) {
        self.held
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(120))
            .expect("the held request arrived");
    }

    pub fn release(&self) {
        let _ = self.release.send(());
    }
}
