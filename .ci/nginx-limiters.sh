#!/usr/bin/env bash
# Crawls behind nginx's stock rate and connection limiters (limit_req ...
# nodelay, limit_conn) on 127.0.0.1 and counts, at the server, what nginx
# answered: the figures for issue 12's real-socket goal (under 2 % refused
# at >= 0.9 of the rate). Not run by CI (it needs nginx: apt-get install
# nginx-light; and python3 for the backend behind limit_conn).
#
#   bash .ci/nginx-limiters.sh [PAGES] [CRAWL_BINARY]
#
# Five servers: 20 r/s burst 5 answering 503 (nginx's default), the same
# answering 429 (limit_req_status 429; nginx sends no Retry-After), 100 r/s
# burst 20 answering 503, 20 r/s without burst (limit_req as it comes: a
# request less than 50 ms after the last one passed is refused), and
# limit_conn 8 (503 beyond 8 requests at once)
# before a Python backend that answers in 50 ms (its reused connections 40
# ms later: Nagle's algorithm and delayed ACKs; 8 at once serve about 80
# pages a second). Each line: the statuses nginx logged, the crawl's time,
# and the refusals per second of the run (second:count, from the first
# request).
set -euo pipefail
pages=${1:-600}
crawl=${2:-target/release/examples/crawl}
[ -x "$crawl" ] || cargo build --release --example crawl
dir=$(mktemp -d)
# (nginx's worker reads the page as another user.)
chmod 755 "$dir"
trap 'nginx -c "$dir/nginx.conf" -p "$dir" -s stop >/dev/null 2>&1 || true; [ -z "${backend:-}" ] || kill "$backend" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat > "$dir/backend.py" <<'PY'
import http.server, socketserver, time
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        time.sleep(0.05)
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256
Server(("127.0.0.1", 18190), Handler).serve_forever()
PY
python3 "$dir/backend.py" &
backend=$!
mkdir -p "$dir/logs" "$dir/html"
echo ok > "$dir/html/ok.txt"
chmod -R a+rX "$dir/html"
cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
error_log $dir/logs/error.log crit;
pid $dir/nginx.pid;
events { worker_connections 1024; }
http {
  # (Each request's time to the millisecond, and its status.)
  log_format at '\$msec \$status';
  access_log $dir/logs/access.log at;
  limit_req_zone \$server_port zone=r20:1m rate=20r/s;
  limit_req_zone \$server_port zone=r100:1m rate=100r/s;
  limit_req_zone \$server_port zone=r20s:1m rate=20r/s;
  limit_conn_zone \$server_port zone=c8:1m;
  upstream backend { server 127.0.0.1:18190; keepalive 64; }
  # (try_files, not return: return answers before limit_req runs.)
  server { listen 127.0.0.1:18091; location / { limit_req zone=r20 burst=5 nodelay; root $dir/html; try_files /ok.txt =404; } }
  server { listen 127.0.0.1:18092; location / { limit_req zone=r20 burst=5 nodelay; limit_req_status 429; root $dir/html; try_files /ok.txt =404; } }
  server { listen 127.0.0.1:18093; location / { limit_req zone=r100 burst=20 nodelay; root $dir/html; try_files /ok.txt =404; } }
  server { listen 127.0.0.1:18095; location / { limit_req zone=r20s; root $dir/html; try_files /ok.txt =404; } }
  server { listen 127.0.0.1:18094; location / { limit_conn c8 8; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://backend; } }
}
CONF
nginx -c "$dir/nginx.conf" -p "$dir"
sleep 0.5
for port in 18091 18092 18093 18095 18094; do
  seq 1 "$pages" | sed "s#^#http://127.0.0.1:$port/p#" > "$dir/urls"
  : > "$dir/logs/access.log"
  "$crawl" --urls "$dir/urls" --json --quiet --timeout 600 > "$dir/out.json" 2>/dev/null
  statuses=$(awk '{print $2}' "$dir/logs/access.log" | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')
  elapsed=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['elapsed_secs'], 1))" "$dir/out.json")
  refused=$(awk '{if (!t0) t0 = $1; if ($2 != 200) c[int($1 - t0)]++} END {for (k in c) printf "%s:%s ", k, c[k]}' "$dir/logs/access.log" | tr ' ' '\n' | sort -n | tr '\n' ' ')
  echo "port $port: $statuses in ${elapsed}s; refused per second: $refused"
done
