//! The `debug` switch: one INFO event per adjustment, like the original's
//! log line; without it the events stay at DEBUG.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::policy::Scrapy2012;
use tower_autothrottle::{AutoThrottleLayer, Config};
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

async fn log_of(debug: bool) -> String {
    let buffer = Buffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(buffer.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let config = Config::builder()
        .policy(Scrapy2012::default().start_delay(Duration::from_secs(1)))
        .debug(debug)
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let mut svc = layer.layer(server(Recorder::default()));
    for i in 0..2 {
        let response = svc
            .ready()
            .await
            .unwrap()
            .call(request("http://a.test/", i, 200))
            .await
            .unwrap();
        drop(response);
    }
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    text
}

#[tokio::test(start_paused = true)]
async fn debug_logs_each_adjustment_like_the_original() {
    let log = log_of(true).await;
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("slot: ")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines.iter().all(|l| l.contains("INFO")), "{log}");
    // (1000 + 200) / 2 = 600 ms, then (600 + 200) / 2 = 400 ms.
    assert!(
        lines[0].contains("slot: http://a.test | conc: 1 | delay:  600 ms | latency:  200 ms"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("delay:  400 ms"), "{}", lines[1]);
    assert!(lines[0].contains("size:"), "{}", lines[0]);
}

#[tokio::test(start_paused = true)]
async fn without_debug_nothing_is_logged_at_info() {
    let log = log_of(false).await;
    assert!(!log.contains("slot: "), "{log}");
}

#[tokio::test(start_paused = true)]
async fn events_carry_the_request_span_and_malformed_headers_warn() {
    let buffer = Buffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(buffer.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let layer = AutoThrottleLayer::new(Config::default());
    let mut svc = layer.layer(server(Recorder::default()));
    let mut req = request("http://a.test/page", 0, 20);
    req.headers_mut().insert("x-status", "429".parse().unwrap());
    req.headers_mut()
        .insert("x-reply-retry-after", "soon".parse().unwrap());
    drop(svc.ready().await.unwrap().call(req).await.unwrap());
    let log = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let in_span = "autothrottle{method=GET uri=http://a.test/page}";
    let adjustment = log.lines().find(|l| l.contains("slot: ")).expect(&log);
    assert!(
        adjustment.contains("DEBUG") && adjustment.contains(in_span),
        "{adjustment}"
    );
    let dispatched = log.lines().find(|l| l.contains("dispatched")).expect(&log);
    assert!(
        dispatched.contains("TRACE") && dispatched.contains(in_span),
        "{dispatched}"
    );
    let warning = log.lines().find(|l| l.contains("WARN")).expect(&log);
    assert!(
        warning.contains("soon") && warning.contains(in_span),
        "{warning}"
    );
}
