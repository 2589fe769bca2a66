//! A real HTTP/1 site on 127.0.0.1 for the integration tests: one listener
//! per host, each recording when requests arrive and how many it serves at
//! once.
//!
//! Paths: `/ok?ms=N` answers 200 after N ms (of tokio time); `/status/CODE`
//! answers CODE, with `Retry-After: S` when `?retry-after=S` is given;
//! `/redirect?to=URL` answers 302 to URL; `/flaky?first=CODE&retry-after=S`
//! answers CODE with Retry-After to the first request, 200 to the others.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

/// What one host saw.
#[derive(Default)]
pub struct Stats {
    active: AtomicUsize,
    max_active: AtomicUsize,
    arrivals: Mutex<Vec<(Instant, String)>>,
}

impl Stats {
    /// The most requests it served at once.
    pub fn max_active(&self) -> usize {
        self.max_active.load(Ordering::SeqCst)
    }

    /// When each request arrived, in order, with its path.
    pub fn arrivals(&self) -> Vec<(Instant, String)> {
        self.arrivals.lock().unwrap().clone()
    }

    /// How many requests arrived.
    pub fn served(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    /// The smallest gap between two arrivals, if there were two.
    pub fn min_gap(&self) -> Option<Duration> {
        let arrivals = self.arrivals();
        arrivals.windows(2).map(|w| w[1].0 - w[0].0).min()
    }
}

/// A host of the site.
pub struct Host {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
}

impl Host {
    /// `http://127.0.0.1:PORT`, the host's slot key.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A URL on this host.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

fn query<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then_some(v)
    })
}

async fn answer(req: Request<Incoming>, stats: Arc<Stats>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let ms: u64 = query(&req, "ms").and_then(|v| v.parse().ok()).unwrap_or(0);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut response = Response::new(Full::new(Bytes::from(format!("page {path}"))));
    if let Some(code) = path.strip_prefix("/status/") {
        *response.status_mut() = code.parse().unwrap_or(StatusCode::BAD_REQUEST);
    } else if path == "/flaky" {
        if stats.served() == 1 {
            let code = query(&req, "first")
                .and_then(|v| v.parse().ok())
                .unwrap_or(429);
            *response.status_mut() = StatusCode::from_u16(code).unwrap();
        }
    } else if path == "/redirect" {
        *response.status_mut() = StatusCode::FOUND;
        let to = query(&req, "to").unwrap_or("/");
        response
            .headers_mut()
            .insert(http::header::LOCATION, to.parse().unwrap());
    }
    if response.status() != StatusCode::OK {
        if let Some(secs) = query(&req, "retry-after") {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, secs.parse().unwrap());
        }
    }
    response
}

/// Starts one host.
pub async fn host() -> Host {
    host_counted(None).await
}

/// Starts one host that also counts its requests in `site`, shared with
/// other hosts.
pub async fn host_counted(site: Option<Arc<Stats>>) -> Host {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(Stats::default());
    let server_stats = Arc::clone(&stats);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let stats = Arc::clone(&server_stats);
            let site = site.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let stats = Arc::clone(&stats);
                    let site = site.clone();
                    async move {
                        let now = stats.active.fetch_add(1, Ordering::SeqCst) + 1;
                        stats.max_active.fetch_max(now, Ordering::SeqCst);
                        if let Some(site) = &site {
                            let now = site.active.fetch_add(1, Ordering::SeqCst) + 1;
                            site.max_active.fetch_max(now, Ordering::SeqCst);
                        }
                        stats
                            .arrivals
                            .lock()
                            .unwrap()
                            .push((Instant::now(), req.uri().path().to_owned()));
                        let response = answer(req, Arc::clone(&stats)).await;
                        stats.active.fetch_sub(1, Ordering::SeqCst);
                        if let Some(site) = &site {
                            site.active.fetch_sub(1, Ordering::SeqCst);
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Host { addr, stats }
}

/// Starts `n` hosts.
pub async fn hosts(n: usize) -> Vec<Host> {
    let mut hosts = Vec::new();
    for _ in 0..n {
        hosts.push(host().await);
    }
    hosts
}
