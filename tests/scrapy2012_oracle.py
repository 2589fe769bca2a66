"""Replays a trace through the original 2012 AutoThrottle code itself.

Usage: python3 scrapy2012_oracle.py REFERENCE.py START_DELAY CHECK_PERIOD MAX_CONCURRENCY < trace

REFERENCE.py is Scrapy's original extension (scrapy/contrib/throttle.py, 2012).
Its Scrapy imports are replaced by small stand-ins so that the class runs as it
is; each input line "LATENCY STATUS" becomes one response on one slot, and the
slot's delay and concurrency are printed after it as "DELAY CONCURRENCY", the
same format as `cargo run --example replay`.
"""
import sys
import types


def stub_modules():
    def module(name, **attrs):
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        return mod

    class NotConfigured(Exception):
        pass

    class Dispatcher:
        def connect(self, *args, **kwargs):
            pass

    from urllib.parse import urlparse

    module("scrapy")
    module("scrapy.xlib")
    module("scrapy.xlib.pydispatch", dispatcher=Dispatcher())
    module("scrapy.exceptions", NotConfigured=NotConfigured)
    module("scrapy.signals", spider_opened=object(), response_received=object())
    sys.modules["scrapy"].signals = sys.modules["scrapy.signals"]
    module("scrapy.utils")
    module("scrapy.utils.httpobj", urlparse_cached=lambda request: urlparse(request.url))
    module("scrapy.resolver", dnscache={})


class Settings:
    def __init__(self, values):
        self.values = values

    def getbool(self, name, default=False):
        return bool(self.values.get(name, default))

    def getfloat(self, name, default=0.0):
        return float(self.values.get(name, default))

    def getint(self, name, default=0):
        return int(self.values.get(name, default))


class Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def main():
    reference, start_delay, check_period, max_concurrency = sys.argv[1:5]
    stub_modules()
    namespace = {"__name__": "scrapy_autothrottle_2012"}
    with open(reference) as f:
        exec(compile(f.read(), reference, "exec"), namespace)
    settings = Settings({
        "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_START_DELAY": float(start_delay),
        "AUTOTHROTTLE_CONCURRENCY_CHECK_PERIOD": int(check_period),
        "AUTOTHROTTLE_MAX_CONCURRENCY": int(max_concurrency),
    })
    slot = Obj(delay=None, concurrency=1)
    downloader = Obj(ip_concurrency=False, slots={"example.com": slot})
    crawler = Obj(settings=settings, engine=Obj(downloader=downloader))
    throttle = namespace["AutoThrottle"].from_crawler(crawler)
    spider = Obj(log=lambda *a, **k: None)
    throttle.spider_opened(spider)
    slot.delay = spider.download_delay
    slot.concurrency = spider.max_concurrent_requests
    out = []
    for line in sys.stdin:
        fields = line.split()
        if not fields:
            continue
        latency, status = float(fields[0]), int(fields[1])
        response = Obj(
            request=Obj(url="http://example.com/"),
            meta={"download_latency": latency},
            status=status,
            body=b"",
        )
        throttle.response_received(response, spider)
        out.append("%.6f %d" % (slot.delay, slot.concurrency))
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
