"""Today's Scrapy AutoThrottle delay rule (scrapy/extensions/throttle.py,
Scrapy 2.x), transcribed in Python so that its float arithmetic is Python's.

Usage: python3 scrapy_oracle.py START MIN MAX TARGET CONCURRENCY < trace

Prints "DELAY CONCURRENCY" after each "LATENCY STATUS" line, like
`cargo run --example replay -- --policy scrapy`.
"""
import sys


def main():
    start, mindelay, maxdelay, target = (float(x) for x in sys.argv[1:5])
    concurrency = int(sys.argv[5])
    delay = max(mindelay, start)
    out = []
    for line in sys.stdin:
        fields = line.split()
        if not fields:
            continue
        latency, status = float(fields[0]), int(fields[1])
        target_delay = latency / target
        new_delay = (delay + target_delay) / 2.0
        new_delay = max(target_delay, new_delay)
        new_delay = min(max(mindelay, new_delay), maxdelay)
        if not (status != 200 and new_delay <= delay):
            delay = new_delay
        out.append("%.6f %d" % (delay, concurrency))
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
