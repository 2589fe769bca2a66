//! A `redis-server` for the tests and the fleet bench.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server`: the one `.ci/run` started (`REDIS_URL`), or one of
/// the test's own, stopped when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    url: Option<String>,
}

impl RedisServer {
    /// The shared server if there is one, else a new one.
    pub async fn any() -> Self {
        match std::env::var("REDIS_URL") {
            Ok(url) => RedisServer {
                child: None,
                port: 0,
                url: Some(url),
            },
            Err(_) => RedisServer::start(None).await,
        }
    }

    pub async fn start(port: Option<u16>) -> Self {
        let port = port.unwrap_or_else(|| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        });
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} ({e}): these tests need redis-server (apt-get install redis-server; .ci/run installs it)")
            });
        let server = RedisServer {
            child: Some(child),
            port,
            url: None,
        };
        // Wait until it answers (a readiness wait, not a timing check).
        let client = redis::Client::open(server.url()).unwrap();
        for _ in 0..500 {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .is_ok()
                {
                    return server;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("redis-server on port {port} did not come up");
    }

    pub fn url(&self) -> String {
        match &self.url {
            Some(url) => url.clone(),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    pub fn stop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let client = redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        cmd.query_async(&mut conn).await.unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
